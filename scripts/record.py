"""record: gather every stage's output into results/record.json and append a row to RECORDS.md."""
from __future__ import annotations

import argparse
import json
from collections import defaultdict

from randopt import record as rec
from randopt.cli import json_arg, run_stage
from randopt.config import population_size
from randopt.io import read_json, write_json_atomic


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m scripts.record", description=__doc__)
    p.add_argument("--config-json", required=True, type=json_arg, help="the validated config, as JSON")
    p.add_argument("--repo-dir", required=True, help="the workflow's git checkout (for the commit)")
    p.add_argument("--model-manifest", required=True)
    p.add_argument("--gsm8k-manifest", required=True)
    p.add_argument("--heldout-manifest", required=True)
    p.add_argument("--topk", required=True)
    p.add_argument("--vote", required=True)
    p.add_argument("--bpb", required=True)
    p.add_argument("--shard-timings", nargs="+", required=True)
    p.add_argument("--members-timings", required=True)
    p.add_argument("--base-train", required=True, help="evaluate_members' base_train.json")
    p.add_argument("--benchmarks", nargs="+", required=True, help="RULE=PATH Snakemake benchmark files")
    p.add_argument("--records-md", required=True)
    p.add_argument("--out", required=True)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)

    def body():
        config = args.config_json
        model, gsm8k, heldout = (read_json(p) for p in (args.model_manifest, args.gsm8k_manifest, args.heldout_manifest))
        topk, vote, bpb = read_json(args.topk), read_json(args.vote), read_json(args.bpb)
        shards = [read_json(p) for p in args.shard_timings]
        members = read_json(args.members_timings)
        base_train = read_json(args.base_train)
        by_rule = defaultdict(list)
        for item in args.benchmarks:
            rule, path = item.split("=", 1)
            by_rule[rule].append(path)
        timings = {rule: rec.benchmark_seconds(paths) for rule, paths in sorted(by_rule.items())}
        # By wall clock: shards that ran side by side (--resources gpu=N) overlap in time.
        shard_wall = rec.wall_clock_span(rec.job_intervals(shards))
        timings["evaluate_shard"] = shard_wall
        generate_s = sum(s["generate_s"] for s in shards)
        gen_tokens = sum(s["gen_tokens"] for s in shards)
        population = population_size(config)
        commit = rec.git_commit(args.repo_dir)
        record = {
            "run_name": config["run_name"],
            "created_utc": rec.now_utc(),
            "commit": commit["sha"], "commit_dirty": commit["dirty"],
            "config_sha256": rec.config_sha256(config),
            "config": config,
            "model": {"id": config["model"]["id"], "sha256": model["sha256"], "source": model["source"],
                      "dtype": model["dtype"], "revision": model.get("revision")},
            "engine": config["engine"] | {"compute_dtype_resolved": rec.single_compute_dtype(shards)},
            "data": {
                "gsm8k_train_sha256": gsm8k["train"]["sha256"], "gsm8k_test_sha256": gsm8k["test"]["sha256"],
                "n_train": gsm8k["train"]["n"], "n_test": gsm8k["test"]["n"],
                "heldout_sha256": heldout["sha256"], "heldout_bytes": bpb["n_bytes"], "heldout_docs": bpb["n_docs"],
                "synthetic": bool(gsm8k["synthetic"] or heldout["synthetic"]),
                "synthetic_parts": {"gsm8k": bool(gsm8k["synthetic"]), "heldout": bool(heldout["synthetic"])},
            },
            "noise": {"kind": "rademacher", "definition": "kernels/noise_ref.py v1"},
            "population": {"n_seeds": config["population"]["n_seeds"], "sigmas": config["population"]["sigmas"],
                           "size": population},
            "decode": config["decode"],
            "topk": [{"fraction": t["fraction"], "k": t["k"],
                      "members": [{k: m[k] for k in ("seed", "sigma", "train_reward")} for m in t["members"]]}
                     for t in topk["topk"]],
            "accuracy": {"base_train": base_train["accuracy"],
                         "base_test": vote["base_test"], "ensemble_test": vote["ensemble_test"],
                         "member_mean_test": vote["member_mean_test"]},
            "bpb": {"base": bpb["base"], "ensemble": bpb["ensemble"], "members": bpb["members"]},
            "timings_s": timings,
            "throughput": {
                "seeds_per_s": population / shard_wall,  # evaluate_shard's wall-clock span
                "evaluate_shard_jobs_s": sum(s["seconds"] for s in shards),  # its jobs' times added up
                "seeds_per_s_loop": population / sum(s["switch_s"] + s["generate_s"] for s in shards),
                "gen_tokens_per_s": gen_tokens / generate_s if generate_s else None,
                "gen_tokens_train": gen_tokens,
                "switch_ms_per_seed": 1000 * sum(s["switch_s"] for s in shards) / population,
                "members_evaluated_this_run": members["evaluated"],
            },
            "versions": rec.package_versions(),
            "hardware": rec.hardware(),
        }
        json.dumps(record, allow_nan=False)  # a record must be plain JSON, no NaN
        write_json_atomic(args.out, record)
        rec.append_records_md(args.records_md, record)

    return run_stage("record", body)


if __name__ == "__main__":
    raise SystemExit(main())
