"""results/record.json: the last finished run's record, copied there at the end of the run.

Each run keeps its record and figures in its own folder (results/runs/<run key>/, randopt/paths.py); this file
is the design card's target and the one a user opens first. It is a byte-for-byte copy of the run's record, not a
pointer: the record already names its folder ("run": {"key", "dir"}), so the copy names the last run, and every
reader of a record (ask --record, eval --record, compare, jq, the terminal's verdict, `snakemake --report`'s
target) reads it as the record it is, with nothing to follow. It is written with one atomic rename after the
run's figures are drawn, so it is the previous run's whole record or this run's, never a mix, and the figures
in the folder it names are that run's.
"""
from __future__ import annotations

import shutil
from pathlib import Path

from randopt.io import atomic_path, read_json, write_text_atomic

# Where `randopt export` writes a finished run's config, to hand it to Snakemake as a --configfile.
RUN_CONFIG = Path(".snakemake") / "randopt" / "run_config.yaml"


def publish(run_record: str | Path, out: str | Path, log: str | Path | None = None) -> None:
    """Copy the run's record onto out (results/record.json) in one atomic rename; log: a line saying which run."""
    run = read_json(run_record).get("run")
    if run is None:
        raise ValueError(f"{run_record}: a record without its run folder (written before run folders); rerun it")
    with atomic_path(out) as tmp:
        shutil.copyfile(run_record, tmp)
    if log is not None:
        write_text_atomic(log, f"{out}: the record of run {run['key']} ({run['dir']})\n")


def run_config_file(record_path: str | Path, directory: str | Path = ".") -> Path:
    """A finished run's config (its record's: validated, its selection mode resolved, run_name as given) written
    as YAML under directory, for Snakemake's --configfile: the workflow then plans that run again, at its keys and
    in its folder (the run key holds the run_name as given, so a default name stays the default)."""
    import yaml
    path = Path(directory) / RUN_CONFIG
    write_text_atomic(path, yaml.safe_dump(read_json(record_path)["config"], sort_keys=False))
    return path
