"""evaluate_shard: score seeds [first, last] at one sigma on the train split; one parquet row per
(seed, problem). Seeds are the unit of reuse: a larger population only adds shards."""
from __future__ import annotations

import argparse
import time

import pandas as pd

from randopt.cli import json_arg, log, run_stage
from randopt.engines.args import add_engine_args, engine_compute_dtype, engine_from_args
from randopt.evaluate import DecodeSpec, build_prompts, evaluate_weights
from randopt.io import atomic_path, read_jsonl, verify_against_manifest, write_json_atomic


def add_decode_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--decode", type=json_arg, required=True,
                   help='JSON: {"max_tokens": 48, "stop": [...], "system": ..., "examples": [...]}')


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m scripts.evaluate_shard", description=__doc__)
    add_engine_args(p)
    add_decode_args(p)
    p.add_argument("--train", required=True, help="frozen train split (JSONL)")
    p.add_argument("--sigma", type=float, required=True)
    p.add_argument("--first-seed", type=int, required=True)
    p.add_argument("--last-seed", type=int, required=True, help="inclusive")
    p.add_argument("--out", required=True, help="parquet")
    p.add_argument("--timings", required=True, help="JSON with load/switch/generate seconds")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)

    def body():
        if args.last_seed < args.first_seed or args.first_seed < 0:
            raise ValueError(f"bad seed range {args.first_seed}..{args.last_seed}")
        started_at, start = time.time(), time.perf_counter()
        verify_against_manifest(args.train)
        problems = read_jsonl(args.train, required=("id", "question", "answer"))
        spec = DecodeSpec.from_config(args.decode)
        engine = engine_from_args(args)
        prompts = build_prompts(engine, problems, spec)
        load_s = time.perf_counter() - start
        frames = []
        for seed in range(args.first_seed, args.last_seed + 1):
            frame = evaluate_weights(engine, prompts, problems, spec, seed, args.sigma)
            log.info("seed %d sigma %g: reward %.3f (%.1f s)", seed, args.sigma, frame["correct"].mean(),
                     frame["switch_s"].iloc[0] + frame["generate_s"].iloc[0])
            frames.append(frame)
        table = pd.concat(frames, ignore_index=True)
        with atomic_path(args.out) as tmp:
            table.to_parquet(tmp, index=False)
        per_seed = table.groupby("seed").first()
        write_json_atomic(args.timings, {
            "stage": "evaluate_shard", "sigma": args.sigma, "seeds": [args.first_seed, args.last_seed],
            "load_s": load_s, "switch_s": float(per_seed["switch_s"].sum()),
            "generate_s": float(per_seed["generate_s"].sum()), "gen_tokens": int(table["n_tokens"].sum()),
            "seconds": time.perf_counter() - start, "compute_dtype": engine_compute_dtype(engine),
            # Epoch seconds, so the record can take the stage's wall-clock span over its shards.
            "started_at": started_at, "ended_at": time.time(),
        })

    return run_stage("evaluate_shard", body)


if __name__ == "__main__":
    raise SystemExit(main())
