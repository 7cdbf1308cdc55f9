"""Which finished run a tool reads (ask, eval, status): a run folder or record, the config files it ran
with, or by default the last run (results/record.json, randopt/result/last_run.py).

A run's files lie relative to the directory the workflow ran in (its work dir): its record and figures in its
own folder (results/runs/<run key>/), the prepared model and the ranking under the stages' content keys.
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from randopt.io import InputError, read_json
from randopt.paths import LAST_RECORD, run_folder

RECORD = "record.json"


@dataclass(frozen=True)
class ChosenRun:
    record_path: Path   # the run's record (or results/record.json, its copy, for the last run)
    workdir: Path       # the directory the workflow ran in

    @property
    def record(self) -> dict:
        return read_json(self.record_path)

    @property
    def folder(self) -> Path | None:
        """The run's own folder (its record and figures); None for a record written before run folders."""
        run = self.record.get("run")
        return self.workdir / run["dir"] if run else None


def workdir_of(record_path: str | Path) -> Path:
    """The directory a record's run ran in: above its run folder (results/runs/<key>/record.json), or above
    results/ for results/record.json and a record written before run folders."""
    path = Path(record_path).resolve()
    folder = Path((read_json(path).get("run") or {}).get("dir", ""))
    if folder.parts and path.parent.parts[-len(folder.parts):] == folder.parts:
        return Path(*path.parent.parts[:-len(folder.parts)])
    return path.parent.parent


def of_record(record_path: str | Path) -> ChosenRun:
    path = Path(record_path)
    if not path.is_file():
        raise InputError(f"{path}: no record here; finish the run first (randopt run, or snakemake {LAST_RECORD})")
    return ChosenRun(path, workdir_of(path))


def choose_run(run: str | Path | None = None, configfiles: Sequence[str | Path] = (),
               directory: str | Path = ".") -> ChosenRun:
    """run: a run folder (results/runs/<key>) or a record file; configfiles: the --configfile files a run ran
    with, in order (their run folder in directory); neither: the last run in directory (results/record.json)."""
    if run is not None and configfiles:
        raise InputError("give a run folder or its config files, not both")
    if run is not None:
        run = Path(run)
        return of_record(run / RECORD if run.is_dir() else run)
    if configfiles:
        folder = Path(directory) / run_folder(run_key_of(configfiles, directory))
        if not (folder / RECORD).is_file():
            raise InputError(f"{folder}: no finished run of {' '.join(map(str, configfiles))} here; run it first "
                             f"(randopt run --configfile {' '.join(map(str, configfiles))})")
        return of_record(folder / RECORD)
    return of_record(Path(directory) / LAST_RECORD)


def run_key_of(configfiles: Sequence[str | Path], directory: str | Path = ".") -> str:
    """The run key of the config files as the workflow plans them on this host (randopt/plan/run.py): the
    embedded default with the files merged over it, planned in the run's directory (its input cache, its
    prepared model, which selection.mode auto reads)."""
    from randopt.config import effective_config
    from randopt.inputs import CACHE_PATH
    from randopt.plan import Host, RunPlan
    config = effective_config([Path(f).resolve() for f in configfiles])
    with contextlib.chdir(directory):
        return RunPlan.from_config(config, Host(cores=os.cpu_count()), CACHE_PATH).run_key


def add_run_arguments(parser, directory_flag: str | None = "--directory") -> None:
    """The arguments by which a tool is told which run to read (choose_run), the same in every tool."""
    parser.add_argument("--run", default=None, metavar="FOLDER|RECORD",
                        help=f"a run's folder ({run_folder('<run key>')}) or its record; default: the last finished "
                             f"run ({LAST_RECORD})")
    parser.add_argument("--configfile", nargs="+", action="extend", default=[], metavar="FILE",
                        help="the run's --configfile files, in order, as given to the workflow: their run")
    if directory_flag:
        parser.add_argument(directory_flag, default=".", help="the directory the workflow ran in (default: here)")


def main(argv=None) -> int:
    """Print a run's folder: the one the config files plan on this host (whether or not it ran yet), else the
    last finished run's. For `make report`, whose report goes into the folder of the run it reports on."""
    import argparse
    import sys
    p = argparse.ArgumentParser(prog="python -m randopt.result.run_choice", description=main.__doc__)
    p.add_argument("--configfile", nargs="*", action="extend", default=[], metavar="FILE",
                   help="the run's --configfile files, in order (none: the embedded default's run)")
    p.add_argument("--last", action="store_true", help="the last finished run's folder (results/record.json's)")
    p.add_argument("--directory", default=".", help="the directory the workflow runs in (default: here)")
    args = p.parse_args(argv)
    try:
        if args.last:
            print(choose_run(directory=args.directory).folder)
        else:
            print(run_folder(run_key_of(args.configfile, args.directory)))
    except (InputError, ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
