"""When each engine job of a run started, had its engine, and ended, and what a member's call cost in it: read
from the jobs' own logs (logs/evaluate_shard/**.log, logs/race_slice/**.log) of one or more run directories.

    python bench/racing/job_times.py DIR[=NAME] ... [--problems N] [-o out.json]

A search's seconds after its engines are up are its members' calls, so a job's seconds from its engine's
readiness (or its start, where it reused a loaded engine) to its end, over its members, is the member call
that selection.mode auto's call-cost curve models (randopt/plan/auto_selection.py): here measured with the jobs
side by side as the run placed them. --problems gives a full evaluation shard's problems (its log does not name
them); a race_slice log names its own. The racing bench's logs tarballs (bench/racing/racing_qwen15b_h200.sh)
hold these directories.
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from randopt.io import write_json_atomic  # noqa: E402
from randopt.runtime.seed_progress import MARKER  # noqa: E402

STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")
SLICE = re.compile(r"round (\d+) chunk (\d+): (\d+) of \d+ racing members on (\d+) problems")
READY = re.compile(r"resident engine: ready in ([\d.]+) s")
REUSED = "resident engine: reusing"
DONE = re.compile(r"INFO done in ([\d.]+) s")


def _time(line: str) -> float | None:
    match = STAMP.match(line)
    return datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp() if match else None


def job_of(log: Path, problems: int | None) -> dict:
    """One engine job's times (seconds since the epoch), members and problems, from its log."""
    start = ready = end = None
    job = {"members": 0, "problems": problems}
    for line in log.read_text(errors="replace").splitlines():
        at = _time(line)
        if at is not None and start is None:
            start = at
        if (m := SLICE.search(line)):
            job.update(round=int(m.group(1)), chunk=int(m.group(2)), members=int(m.group(3)),
                       problems=int(m.group(4)))
        elif (m := READY.search(line)):
            ready, job["engine_start_s"] = at, float(m.group(1))
        elif REUSED in line:
            ready, job["engine_start_s"] = at, 0.0
        elif MARKER in line:
            job["members"] += 1
        elif (m := DONE.search(line)):
            end = at
    if None in (start, ready, end) or not job["members"] or not job["problems"]:
        raise ValueError(f"{log}: not a finished engine job's log (start, engine, end, members and problems are "
                         "needed; a full evaluation shard needs --problems)")
    job.update(start=start, ready=ready, end=end, call_s=(end - ready) / job["members"])
    return job


def groups(jobs: list[dict]) -> list[dict]:
    """The jobs side by side: a full evaluation's shards, or one racing round's slices. A group's member call is
    its jobs' seconds after their engines over their members; its members/s once up, its members over the seconds
    from its first engine's readiness (among the engines it started; its start where it started none) to its
    last job's end, as bench/peers' report counts them."""
    keyed: dict = {}
    for job in jobs:
        keyed.setdefault((job["run"], job.get("round")), []).append(job)
    out = []
    for (run, round_), members in sorted(keyed.items(), key=lambda kv: min(j["start"] for j in kv[1])):
        t0 = min(j["start"] for j in members)
        up = min((j["ready"] for j in members if j["engine_start_s"] > 0), default=t0)
        last = max(j["end"] for j in members)
        out.append({"run": run, "round": round_, "problems": sorted({j["problems"] for j in members}),
                    "jobs": len(members), "members": sum(j["members"] for j in members),
                    "first_start_to_last_end_s": round(last - t0, 2),
                    "engines_ready_s": [round(j["ready"] - j["start"], 2) for j in members],
                    "call_s": round(sum(j["end"] - j["ready"] for j in members) / sum(j["members"] for j in members), 3),
                    "call_s_median_job": round(statistics.median(j["call_s"] for j in members), 3),
                    "members_per_s_once_up": round(sum(j["members"] for j in members) / (last - up), 3)})
    return out


def read(runs: dict[str, Path], problems: int | None = None) -> dict:
    """The report for these run directories (name: directory holding logs/)."""
    jobs = []
    for name, path in runs.items():
        logs = sorted((path / "logs").glob("evaluate_shard/**/*.log")) + sorted((path / "logs").glob("race_slice/**/*.log"))
        jobs += [{"run": name, **job_of(log, problems), "log": log.relative_to(path).as_posix()} for log in logs]
    return {"what": "bench/racing/job_times.py: each engine job's start, engine and end, and a member's call after "
                    "its engine, from the jobs' logs", "groups": groups(jobs),
            "jobs": [{k: (round(v, 3) if isinstance(v, float) else v) for k, v in j.items()} for j in jobs]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="a run directory holding logs/ (DIR or DIR=NAME)")
    parser.add_argument("--problems", type=int, help="a full evaluation shard's problems a member")
    parser.add_argument("-o", "--out", type=Path)
    args = parser.parse_args()
    runs = {(name or path): Path(path) for path, _, name in (spec.partition("=") for spec in args.runs)}
    try:
        report = read(runs, args.problems)
    except ValueError as err:
        raise SystemExit(str(err)) from None
    if args.out:
        write_json_atomic(args.out, report)
    print(json.dumps(report["groups"], indent=1))


if __name__ == "__main__":
    main()
