"""How long `python -m randopt.stages.lm_eval` takes on a finished run: the base model and one top-k ensemble
on the local tasks that ship with randopt, timed end to end (process start, lm-eval's import, the engine
load, both models), with each part's seconds as the command's results report them.

    python bench/lm_eval/bench_lm_eval.py --run-dir RUN --ensemble 0.1 --out bench/results/lm_eval/lm_eval_<machine>.json
    python bench/lm_eval/bench_lm_eval.py --run-dir RUN --from RUN/results/lm_eval/.../lm_eval.json \
        --benchmark RUN/results/benchmarks/lm_eval/....tsv --out ...    # what the workflow's rule lm_eval ran

Arguments after `--` go to randopt.stages.lm_eval as they are (lm-eval's own: --limit, --gen_kwargs, ...).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from randopt.io import write_json_atomic  # noqa: E402
TASKS = "randopt_arith,randopt_arith_choice"


def cpu() -> str:
    """The CPU model, its cores and whether it multiplies bf16 natively (the engine's compute dtype)."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    model = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "?")
    flags = next((line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("flags")), [])
    bf16 = [f for f in ("avx512_bf16", "amx_bf16") if f in flags]
    return f"{model}, {os.cpu_count()} cores" + (f", {' '.join(bf16)}" if bf16 else "")


def seconds_from_log(text: str, labels: list[str]) -> dict:
    """Each model's seconds from the command's log: lm-eval logs "Using pre-initialized model" as each
    model starts, and the command "done in S s" at its end (S counted from the process's start)."""
    import re
    stamp = r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+) "

    def when(line):
        return datetime.strptime(re.match(stamp, line).group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
    starts = [when(line) for line in text.splitlines() if re.match(stamp, line) and "Using pre-initialized model" in line]
    end_line = next(line for line in text.splitlines() if re.match(stamp, line) and " done in " in line)
    end = when(end_line)
    total = float(re.search(r"done in ([\d.]+) s", end_line).group(1))
    out = {"before_the_first_model": starts[0] - (end - total)}
    for label, a, b in zip(labels, starts, starts[1:] + [end]):
        out[label] = b - a
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run-dir", required=True)
    p.add_argument("--ensemble", default="0.1", help="the ensemble's fraction (or K members)")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--tasks", default=TASKS)
    p.add_argument("--out", required=True)
    p.add_argument("--note", default="", help="what the machine was doing besides (shared, load)")
    p.add_argument("--from", dest="done", help="summarize this finished lm_eval.json instead of running one")
    p.add_argument("--benchmark", help="with --from: Snakemake's benchmark TSV of that job (its wall seconds)")
    p.add_argument("--commit", help="with --from: the commit the job ran (default: this checkout's HEAD)")
    p.add_argument("--log", help="with --from: that job's log, for each model's seconds when the results lack them")
    args, extra = p.parse_known_args(argv)
    extra = [a for a in extra if a != "--"]
    if args.done:
        import csv
        doc = json.loads(Path(args.done).read_text())
        table = Path(args.done).with_suffix(".tsv").read_text()
        bench = next(csv.DictReader(open(args.benchmark), delimiter="\t")) if args.benchmark else {}
        wall = float(bench["s"]) if bench else None
        args.cpu_time_s = float(bench["cpu_time"]) if bench else None
        if "seconds" not in doc and args.log:
            doc["seconds"] = seconds_from_log(Path(args.log).read_text(), list(doc["models"]))
        command, tmp, load = ["python", "-m", "randopt.stages.lm_eval", "(rule lm_eval)", *doc["lm_eval_args"]], "", None
        return write(args, doc, table, wall, command, tmp, load)
    with tempfile.TemporaryDirectory() as tmp:
        command = [sys.executable, "-m", "randopt.stages.lm_eval", "--run-dir", args.run_dir, "--base", "--ensemble",
                   args.ensemble, "--threads", str(args.threads), "--tasks", args.tasks,
                   "--out", f"{tmp}/lm_eval.json", "--table", f"{tmp}/lm_eval.tsv", *extra]
        load = os.getloadavg()[0]
        start = time.perf_counter()
        subprocess.run(command, cwd=REPO, check=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
        wall = time.perf_counter() - start
        doc = json.loads(Path(f"{tmp}/lm_eval.json").read_text())
        table = Path(f"{tmp}/lm_eval.tsv").read_text()
    return write(args, doc, table, wall, command, tmp, load)


def write(args, doc: dict, table: str, wall: float | None, command: list[str], tmp: str, load: float) -> int:
    labels = list(doc["models"])
    ensemble = doc["models"][labels[-1]]["randopt"]
    commit = getattr(args, "commit", None) or subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    result = {
        "machine": cpu() + (f"; {args.note}" if args.note else ""),
        **({"load_average_at_start": round(load, 2)} if load is not None else {}),
        **({"cpu_time_s": args.cpu_time_s} if getattr(args, "cpu_time_s", None) else {}),
        "commit": commit or None, "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        "command": "python -m randopt.stages.lm_eval " + " ".join(command[3:]).replace(tmp, "OUT") if tmp else " ".join(command),
        "run": {k: ensemble["run"][k] for k in ("run_name", "record_sha256", "model_sha256")},
        "ensemble_members": len(ensemble["members"]), "tasks": doc["tasks"],
        "wall_s": round(wall, 1) if wall is not None else None, "seconds": {k: round(v, 1) for k, v in doc["seconds"].items()},
        "table": table.splitlines(),
    }
    write_json_atomic(args.out, result)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
