"""The timings of a reduced run of the standard's protocol (bench/standard/shape_run.sh), and its wall
time extrapolated to the standard's population: one JSON.

Measured, from the run's own files (the record when the run finished, else what its jobs wrote):
engine start (the resident engine's load, .snakemake/engines/*.log), the switch per seed and a member's
seconds in the search loop (results/shards/*/*.timings.json), members/s (loop, and over the search's
wall-clock span), evaluate_members' seconds per model (switch + generate on the test split) and
score_bpb's per model.

Extrapolated to --members (1,536), linearly in what scales, each term named in the JSON:
  search   = (members x a member's loop seconds + jobs x a job's own overhead (its seconds less its loop
             and its wait for the engine)) / E + one engine start (the jobs of an engine share it; the E
             engines, --gpus / --tensor-parallel-size of them, start at once on their own GPUs)
  evaluate_members = (1 + k) x its seconds per model (k: the largest top-k list, 154; the 4 % list is
             inside it), the test split as here (200 problems x max_tokens)
  score_bpb = its own engine start + (1 + k) x its seconds per model (its stage seconds less that start,
             over the models it scored) x (--heldout-tokens / this run's held-out tokens)
  the rest (freeze, prepare, rank, vote, record): as measured here (they do not grow with members).
A random-weight model answers to max_tokens, so every term is an upper bound for real weights of this shape.
    python bench/standard/shape_summary.py --workdir /tmp/randopt-shape7b --out shape_7b_h200.json
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import sys
from pathlib import Path


def read(path):
    with open(path) as fh:
        return json.load(fh)


def engine_starts(workdir: Path) -> dict[str, list[float]]:
    """Seconds each resident engine took to load, by the GPUs it held (one log a device: the server's
    'serving ... (loaded in X s)' lines, in the order they started there)."""
    return {Path(log).stem: [float(s) for s in re.findall(r"serving a .*?\(loaded in ([0-9.]+) s\)", Path(log).read_text())]
            for log in sorted(glob.glob(str(workdir / ".snakemake" / "engines" / "*.log")))}


def dag_error(snakemake_log: Path | None) -> str | None:
    """The workflow's refusal at DAG build (randopt's 'invalid config: ...' line), if it refused."""
    if snakemake_log is None or not snakemake_log.is_file():
        return None
    found = re.findall(r"invalid config: .*", snakemake_log.read_text(errors="replace"))
    return found[0] if found else None


def summarize(workdir: Path, *, members_full: int, k_full: int, jobs_full: int, heldout_tokens: int,
              engines: int = 1) -> dict:
    shards = [read(p) for p in sorted(glob.glob(str(workdir / "results" / "shards" / "*" / "*" / "*.timings.json")))]
    members_t = [read(p) for p in glob.glob(str(workdir / "results" / "members" / "*" / "*" / "timings.json"))]
    bpb = [read(p) for p in glob.glob(str(workdir / "results" / "bpb" / "*" / "*" / "*" / "bpb.json"))]
    record_path = workdir / "results" / "record.json"
    record = read(record_path) if record_path.is_file() else None
    by_device = engine_starts(workdir)
    # The first start on each device is a search engine's (they start at once, on their own GPUs: the
    # slowest counts); a later one on a device is an engine another stage needed (score_bpb's own).
    firsts = [starts[0] for starts in by_device.values() if starts]
    later = [s for starts in by_device.values() for s in starts[1:]]
    out: dict = {"finished": record is not None, "engine_start_s": max(firsts) if firsts else None,
                 "engine_starts_s": by_device, "engines": engines}
    n = sum(len(s["members_evaluated"]) for s in shards)
    if not n:
        return out | {"error": "no evaluate_shard job finished: nothing to extrapolate from"}
    loop = sum(s["switch_s"] + s["generate_s"] for s in shards)
    span = max(s["ended_at"] for s in shards) - min(s["started_at"] for s in shards)
    member_s = loop / n
    job_overhead = sum(s["seconds"] - s["switch_s"] - s["generate_s"] - s["load_s"] for s in shards) / len(shards)
    out["search"] = {"members": n, "jobs": len(shards), "switch_ms_per_seed": 1000 * sum(s["switch_s"] for s in shards) / n,
                     "member_s": member_s, "members_per_s_loop": n / loop,
                     "members_per_s_all_engines": engines * n / loop, "members_per_s_span": n / span,
                     "span_s": span, "gen_tokens_per_member": sum(s["gen_tokens"] for s in shards) / n,
                     "gen_tokens_per_s": sum(s["gen_tokens"] for s in shards) / sum(s["generate_s"] for s in shards),
                     "job_overhead_s": job_overhead,
                     "engine_wait_s": [round(s["load_s"], 2) for s in shards]}
    start = out["engine_start_s"] or max(s["load_s"] for s in shards)
    full = {"engine_start_s": start, "search_s": (members_full * member_s + jobs_full * job_overhead) / engines}
    if members_t and members_t[0]["evaluated"]:
        m = members_t[0]
        per = (m["switch_s"] + m["generate_s"]) / m["evaluated"]
        out["evaluate_members"] = m | {"per_model_s": per}
        full["evaluate_members_s"] = (1 + k_full) * per
    if bpb and bpb[0]["evaluated"]:
        b = bpb[0]
        # score_bpb reuses the search's resident engine where its window fits the default context
        # (rules/common.smk, bpb_engine_options); where it starts its own, that start is counted once
        bpb_start = sum(later)
        per = max(b["seconds"] - bpb_start, 0.0) / b["evaluated"]
        out["score_bpb"] = {k: b[k] for k in ("n_docs", "n_tokens", "evaluated", "seconds")} | {
            "engine_start_s": bpb_start, "per_model_s": per}
        full["score_bpb_engine_start_s"] = bpb_start
        full["score_bpb_s"] = (1 + k_full) * per * heldout_tokens / b["n_tokens"]
    if record:
        fixed = {k: v for k, v in record["timings_s"].items()
                 if k not in ("evaluate_shard", "race_slice", "evaluate_members", "score_bpb")}
        out["record"] = {"timings_s": record["timings_s"], "throughput": record["throughput"],
                         "model": record["model"], "not_a_result": record["accuracy"].get("not_a_result")}
        full["other_stages_s"] = sum(fixed.values())
    full["total_s"] = sum(full.values())
    full["total_h"] = full["total_s"] / 3600
    out["extrapolated"] = full | {
        "to": {"members": members_full, "largest_topk": k_full, "evaluate_shard_jobs": jobs_full,
               "heldout_tokens": heldout_tokens},
        "how": ("search: (members x the measured loop seconds per member + jobs x a job's own overhead) / the "
                "engines running at once; one engine start (each engine resident, shared by its jobs; the engines "
                "start at once on their own GPUs); evaluate_members and score_bpb: (1 + k) models x "
                "their measured seconds per model (score_bpb scaled by held-out tokens); other stages as measured. "
                "Upper bound: random weights answer to max_tokens."),
        "missing": [t for t in ("evaluate_members_s", "score_bpb_s", "other_stages_s") if t not in full]}
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workdir", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--members", type=int, default=1536, help="the population to extrapolate to (512 x 3)")
    p.add_argument("--largest-topk", type=int, default=154, help="k of the largest top-k list (0.1 x 1,536)")
    p.add_argument("--jobs", type=int, default=12, help="evaluate_shard jobs of the full run (shards of 128)")
    p.add_argument("--heldout-tokens", type=int, default=65_000, help="the standard's held-out tokens")
    p.add_argument("--workflow-rc", type=int, default=None)
    p.add_argument("--wall-s", type=float, default=None, help="the device call's seconds so far")
    p.add_argument("--tensor-parallel-size", type=int, default=1, help="engine.tensor_parallel_size of the run")
    p.add_argument("--gpus", type=int, default=1, help="Snakemake's gpu resource: gpus / TP engines ran at once")
    p.add_argument("--snakemake-log", default=None, help="the workflow's log, for a refusal at DAG build")
    args = p.parse_args(argv)
    engines = max(1, args.gpus // args.tensor_parallel_size)
    summary = {"script": "bench/standard/shape_run.sh", "workflow_rc": args.workflow_rc,
               "call_wall_s": args.wall_s, "host": os.uname().nodename,
               "layout": {"engines": engines, "tensor_parallel_size": args.tensor_parallel_size, "gpus": args.gpus,
                          "name": f"{engines} x TP {args.tensor_parallel_size}"}}
    refused = dag_error(Path(args.snakemake_log) if args.snakemake_log else None)
    if refused:
        summary["refused_at_dag_build"] = refused
    try:
        import torch
        summary["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except Exception as err:  # the summary is still written without it
        summary["gpu"] = f"unknown ({err})"
    summary |= summarize(Path(args.workdir), members_full=args.members, k_full=args.largest_topk,
                         jobs_full=args.jobs, heldout_tokens=args.heldout_tokens, engines=engines)
    Path(args.out).write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
