"""What distill.enabled adds to a run's time, from a run directory (bench/distill/README.md).

    python bench/distill/measure.py --run-dir DIR --out bench/results/distill/distill_cpu_<machine>.json

Each distillation job's Snakemake benchmark file (results/benchmarks/<rule>/..., the seconds the record's
timings_s adds up: rules/common.smk get_benchmarks) gives the time it added; the sum over distill_data,
both distill_train jobs and both evaluate_distilled jobs is what the run paid for distillation. When the
run's record is there, its distill block (accuracies, bpb, intervals, sizes) and the other stages'
seconds come along.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from randopt.records.assemble import benchmark_seconds, hardware  # noqa: E402

DISTILL_STAGES = ("distill_data", "distill_train", "evaluate_distilled")


def stage_seconds(run_dir: Path) -> dict[str, dict[str, float]]:
    """rule -> {benchmark file (below its rule's folder): seconds} of every distillation job that finished."""
    found = {}
    for stage in DISTILL_STAGES:
        folder = run_dir / "results" / "benchmarks" / stage
        found[stage] = {p.relative_to(folder).as_posix(): benchmark_seconds([str(p)]) for p in sorted(folder.rglob("*.tsv"))}
    return found


def git_head(where: Path) -> str | None:
    if not (where / ".git").exists() and where != Path(__file__).parent:
        return None
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=where)
    return out.stdout.strip() or None


def measure(run_dir: Path) -> dict:
    jobs = stage_seconds(run_dir)
    result = {"machine": hardware(), "created_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              # the run's own checkout when it is one (a clean clone), else this script's
              "commit": next((c for c in (git_head(run_dir), git_head(Path(__file__).parent)) if c), None),
              "python": platform.python_version(), "load_average_at_end": list(os.getloadavg()),
              "added_s": sum(s for stage in jobs.values() for s in stage.values()),
              "added_s_by_stage": {stage: sum(v.values()) for stage, v in jobs.items()}, "jobs_s": jobs,
              "jobs_finished": sum(len(v) for v in jobs.values())}
    record_path = run_dir / "results" / "record.json"
    if record_path.is_file():
        record = json.loads(record_path.read_text())
        rnd = record["distill"]["rounds"][0]
        result |= {"rest_of_run_s": {k: v for k, v in record["timings_s"].items() if k not in DISTILL_STAGES},
                   "population": record["population"], "distilled_k": rnd["k"], "sizes": rnd["sizes"],
                   "test_accuracy": rnd["test_accuracy"], "bpb": rnd["bpb"], "intervals": rnd["intervals"],
                   "models": rnd["models"], "distill_config": record["config"]["distill"],
                   # distill.rounds > 1: every round's block (the fields above are round 1's)
                   "rounds": record["distill"]["rounds"]}
    return result


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--run-dir", required=True, type=Path, help="the workflow's directory (holds results/)")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--wall-s", type=float, default=None,
                   help="the run's own end-to-end seconds, as its caller timed them (the benchmarks above miss waits)")
    p.add_argument("--wall-without-s", type=float, default=None,
                   help="the same protocol's end-to-end seconds with distillation off, on the same machine")
    args = p.parse_args(argv)
    result = measure(args.run_dir)
    if args.wall_s is not None:
        result["wall_s"] = args.wall_s
        if args.wall_without_s is not None:   # what make record pays in wall-clock time, both runs timed alike
            result |= {"wall_without_distill_s": args.wall_without_s, "wall_added_s": args.wall_s - args.wall_without_s}
    args.out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    print(json.dumps({k: result.get(k) for k in ("added_s", "added_s_by_stage", "test_accuracy")}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
