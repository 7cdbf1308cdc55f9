"""Where a run stands: each shard's seeds done out of its total, and an ETA for the whole search.

    python -m randopt.stages.status [--directory RUN_DIR] [--configfile a.yaml b.yaml | --run FOLDER]   (or: make status)

Works during a run or after it, from what the run leaves on disk: a shard whose table exists is
done; a shard still running (or stopped) counts the seeds its log reports finished (evaluate_shard
logs one structured line a seed: randopt/runtime/seed_progress.py); a shard is running only while a Snakemake
run holds the directory (its lock files), else it is stopped. The run: the --configfile files' (the repo's
config/config.yaml with them merged over it in order, as Snakemake merges them), finished or not; the run folder
--run names; or by default the run in progress (the one whose record a Snakemake run here is making, with the
config it wrote at its start: randopt/result/run_started.py), else the last finished run's
(results/record.json's config), else the embedded default's. The first line says which run, and whether it is
finished.
"""
from __future__ import annotations

import argparse
import datetime as dt
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from randopt.config import ConfigError, effective_config
from randopt.io import InputError
from randopt.keys import run_keys
from randopt.paths import LAST_RECORD, RACE_SURVIVORS, layout, run_folder
from randopt.population import Population, shard_stem, sigma_label
from randopt.result.run_choice import add_run_arguments
from randopt.result.run_started import run_config, runs_in_progress
from randopt.runtime import seed_progress

FAILED = re.compile(r"^(error: |Traceback )", re.M)


@dataclass
class Shard:
    sigma: str
    first: int
    last: int
    done: int
    state: str  # done | running | stopped | failed | waiting
    seed_seconds: list[float]

    @property
    def total(self) -> int:
        return self.last - self.first + 1

    @property
    def stem(self) -> str:
        return shard_stem(self.sigma, self.first, self.last)


def run_active(run_dir: Path) -> bool:
    """Whether a Snakemake run holds the directory: its lock files exist while it runs and are removed
    when it ends, also when stopped by Ctrl-C or SIGTERM (a SIGKILLed run leaves them behind)."""
    return any((run_dir / ".snakemake" / "locks").glob("*.lock"))


def read_shard(run_dir: Path, eval_key: str, sigma: str, first: int, last: int, active: bool = True) -> Shard:
    stem = shard_stem(sigma, first, last)
    table = run_dir / "results" / "shards" / eval_key / f"{stem}.parquet"
    log = run_dir / "logs" / "evaluate_shard" / eval_key / f"{stem}.log"
    text = log.read_text(errors="replace") if log.is_file() else ""
    finished = seed_progress.finished(text)
    seconds = [t for t in finished.values() if t is not None]  # the ETA's rate: generated seeds only
    if table.is_file():
        return Shard(sigma, first, last, last - first + 1, "done", seconds)
    state = ("waiting" if not log.is_file() else "failed" if FAILED.search(text)
             else "running" if active else "stopped")
    return Shard(sigma, first, last, len(finished), state, seconds)


def collect(run_dir: Path, config: dict) -> list[Shard]:
    eval_key, active, population = run_keys(config)["eval"], run_active(run_dir), Population.from_config(config)
    return [read_shard(run_dir, eval_key, sigma_label(s), a, b, active)
            for s in population.sigmas for a, b in population.shard_ranges()]


def eta_seconds(shards: list[Shard]) -> float | None:
    """Remaining seeds x the mean seconds per seed seen so far, divided by the shards running side by
    side now (at least one). None until some seed has finished."""
    times = [t for s in shards for t in s.seed_seconds]
    if not times:
        return None
    remaining = sum(s.total - s.done for s in shards)
    running = max(1, sum(s.state == "running" for s in shards))
    return remaining * (sum(times) / len(times)) / running


def record_line(record: Path | None) -> str:
    """Where the run's record is (its own folder: randopt/paths.py run_folder), or that it is not there yet."""
    return f"record: {record if record is not None and record.is_file() else 'not written yet'}"


def racing_report(run_dir: Path, config: dict, record: Path | None = None) -> str:
    """Under selection.mode racing: the rounds decided so far and the members still racing."""
    from randopt.io import read_json
    from randopt.selection.plan import RacePlan
    keys, plan = run_keys(config), RacePlan.from_config(config)
    marks, size = plan.checkpoints, plan.population.size
    race = run_dir / layout(keys)["race"]
    decided = [read_json(p) for p in sorted(race.glob(RACE_SURVIVORS.format(round="*")))]
    racing = len(decided[-1]["keep"]) if decided else size
    state = "search finished" if len(decided) == len(marks) else (
        "running" if run_active(run_dir) else "no run under way (restart it to go on)")
    lines = [f"racing: {len(decided)}/{len(marks)} rounds decided, {racing} of {size} members "
             f"racing, {state}"]
    lines += [f"  round {d['round']}: {d['report']['problems_seen']:>5} problems seen, {d['report']['members']:>6} "
              f"racing, {d['report']['dropped']:>6} stopped" for d in decided]
    lines.append(record_line(record))
    return "\n".join(lines)


def as_run(run_dir: Path, config: dict) -> dict:
    """The config with the mode the run took: selection.mode auto is decided at the workflow's DAG build
    (randopt/plan/auto_selection.py), and a run that races has its rounds' folder; else it is full evaluation."""
    if config["selection"]["mode"] != "auto":
        return config
    racing = config | {"selection": config["selection"] | {"mode": "racing"}}
    keys = run_keys(racing)
    raced = (run_dir / layout(keys)["race"]).is_dir()
    return racing if raced else config | {"selection": config["selection"] | {"mode": "full"}}


def report(run_dir: Path, config: dict, record: Path | None = None) -> str:
    """record: the run's record (in its own folder), where it is known."""
    config = as_run(run_dir, config)
    if config["selection"]["mode"] == "racing":
        return racing_report(run_dir, config, record)
    shards = collect(run_dir, config)
    done, total = sum(s.done for s in shards), sum(s.total for s in shards)
    eta = eta_seconds(shards)
    if done == total:
        eta_text = "search finished"
    elif not run_active(run_dir):
        eta_text = "no run under way (restart it to go on)" + ("" if eta is None else f"; ETA then {dt.timedelta(seconds=round(eta))}")
    elif eta is None:
        eta_text = "ETA unknown until a seed finishes"
    else:
        eta_text = f"ETA {dt.timedelta(seconds=round(eta))}"
    lines = [f"search: {done}/{total} seeds ({100 * done / total:.0f} %), "
             f"{sum(s.state == 'running' for s in shards)} shards running, {eta_text}"]
    width = max(len(s.stem) for s in shards)
    lines += [f"  {s.stem:<{width}}  {s.done:>5}/{s.total:<5} {s.state}" for s in shards]
    failed = [s for s in shards if s.state == "failed"]
    if failed:
        lines.append(f"{len(failed)} shards failed: see logs/evaluate_shard/.../{failed[0].stem}.log")
    lines.append(record_line(record))
    return "\n".join(lines)


def run_line(run_dir: Path, run_key: str) -> str:
    """Which run the report is of: its folder, and whether a run here is making it, it is finished, or neither."""
    state = ("in progress" if run_key in runs_in_progress(run_dir)
             else "finished" if (run_dir / run_folder(run_key) / "record.json").is_file()
             else "not finished, no run under way")
    return f"run: {run_folder(run_key)} ({state})"


def chosen_run(run_dir: Path, run: str | None, configfiles: list[str]) -> tuple[dict, Path | None, str]:
    """The config and record path of the run asked about (the module's docstring says which), and run_line's."""
    from randopt.result.run_choice import choose_run, run_key_of
    if configfiles:
        config = effective_config(configfiles)
        try:  # the run's folder needs its plan on this host (the inputs' sha256s); a run not yet started has one
            key = run_key_of(configfiles, run_dir)
        except (ConfigError, InputError, ValueError, OSError) as err:
            return config, None, f"run: of {' '.join(map(str, configfiles))}, its folder unknown here ({err})"
        return config, run_dir / run_folder(key) / "record.json", run_line(run_dir, key)
    if run is None:
        for key in runs_in_progress(run_dir):   # a run under way, whose config is on disk since it started
            config = run_config(key, run_dir)
            if config is not None:
                return config, run_dir / run_folder(key) / "record.json", run_line(run_dir, key)
        if not (run_dir / LAST_RECORD).is_file():   # nothing finished here: the embedded default's search
            return effective_config([]), None, "run: the embedded default's (no run here has finished)"
    chosen = choose_run(run, directory=run_dir)
    record = chosen.record
    line = (run_line(run_dir, record["run"]["key"]) if record.get("run")
            else f"run: {chosen.record_path} (finished, written before run folders)")
    return record["config"], (chosen.folder or chosen.workdir / "results") / "record.json", line


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m randopt.stages.status", description=__doc__.split("\n\n")[0])
    add_run_arguments(p)
    args = p.parse_args(argv)
    try:
        if args.run and args.configfile:
            raise InputError("give a run folder (--run) or its config files (--configfile), not both")
        config, record, which = chosen_run(Path(args.directory), args.run, args.configfile)
    except (ConfigError, InputError, OSError, yaml.YAMLError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(which)
    print(report(Path(args.directory), config, record))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
