"""evaluate_shard: score seeds [first, last] at one sigma on the train split; one parquet row per
(seed, problem). The stage: randopt/stages/evaluate_shard.py."""
from __future__ import annotations

import argparse

from randopt.runtime.cli import add_decode_args, run_stage
from randopt.runtime.engine_args import add_engine_args, engine_makers_from_args
from randopt.stages import evaluate_shard


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m scripts.evaluate_shard", description=__doc__)
    add_engine_args(p)
    add_decode_args(p)
    p.add_argument("--train", required=True, help="frozen train split (JSONL)")
    p.add_argument("--sigma", type=float, required=True)
    p.add_argument("--first-seed", type=int, required=True)
    p.add_argument("--last-seed", type=int, required=True, help="inclusive")
    p.add_argument("--block-size", type=int, default=None,
                   help="problems per fixed answer block, each one engine call (randopt/scoring/answer_blocks.py); "
                        "absent: one block")
    p.add_argument("--order-seed", type=int, default=0, help="seed of the problem order the blocks cut (selection.order_seed)")
    p.add_argument("--member-batch", type=int, default=1,
                   help="seeds decoded together, torch engine only (engine.member_batch); 1: one at a time")
    p.add_argument("--cache-dir", required=True,
                   help="the answer cache: each seed's answers are kept there as it finishes, and reused")
    p.add_argument("--out", required=True, help="parquet")
    p.add_argument("--timings", required=True, help="JSON with load/switch/generate seconds")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    # the engine makers inside the stage: a bad --engines-in-job is the stage's clear error
    return run_stage("evaluate_shard", lambda: evaluate_shard.run(
        make_engines=engine_makers_from_args(args), decode=args.decode, train=args.train,
        sigma=args.sigma, first_seed=args.first_seed, last_seed=args.last_seed, block_size=args.block_size,
        order_seed=args.order_seed, member_batch=args.member_batch, cache_dir=args.cache_dir, out=args.out, timings=args.timings))


if __name__ == "__main__":
    raise SystemExit(main())
