"""evaluate_members: the base model and every top-k member answer the test split (cached per member);
the base model answers the train split too. The stage: randopt/stages/evaluate_members.py."""
from __future__ import annotations

import argparse
from functools import partial

from randopt.runtime.cli import add_decode_args, run_stage
from randopt.runtime.engine_args import add_engine_args, engine_from_args
from randopt.stages import evaluate_members


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m scripts.evaluate_members", description=__doc__)
    add_engine_args(p)
    add_decode_args(p)
    p.add_argument("--test", required=True, help="frozen test split (JSONL)")
    p.add_argument("--train", required=True, help="frozen train split (JSONL): the base model answers it too")
    p.add_argument("--base-train-out", required=True,
                   help="JSON: the base model's train accuracy, the reference for the members' train rewards")
    p.add_argument("--topk", required=True, help="rank's top-k JSON")
    p.add_argument("--cache-dir", required=True, help="content-addressed per-member results")
    p.add_argument("--out", required=True, help="parquet: one row per (member, problem)")
    p.add_argument("--timings", required=True)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    return run_stage("evaluate_members", partial(
        evaluate_members.run, make_engine=partial(engine_from_args, args), decode=args.decode, test=args.test,
        train=args.train, topk=args.topk, cache_dir=args.cache_dir, out=args.out, timings=args.timings,
        base_train_out=args.base_train_out))


if __name__ == "__main__":
    raise SystemExit(main())
