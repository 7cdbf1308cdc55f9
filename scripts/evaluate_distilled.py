"""evaluate_distilled: a fine-tuned model (distilled or control) answers the test split and scores the
held-out text as the base model does. The stage: randopt/stages/evaluate_distilled.py."""
from __future__ import annotations

import argparse
from functools import partial

from randopt.runtime.cli import add_decode_args, run_stage
from randopt.runtime.engine_args import add_engine_args, engine_from_args
from randopt.stages import evaluate_distilled


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m scripts.evaluate_distilled", description=__doc__)
    add_engine_args(p)
    add_decode_args(p)
    p.add_argument("--model-manifest", required=True, help="distill_train's manifest of the model in --model-dir")
    p.add_argument("--arm", required=True, choices=["distilled", "control"])
    p.add_argument("--test", required=True, help="frozen test split (JSONL)")
    p.add_argument("--heldout", required=True, help="the held-out slice (JSONL)")
    p.add_argument("--out-answers", required=True, help="parquet: one row per test problem")
    p.add_argument("--out", required=True, help="JSON: test accuracy, per-problem correctness, bpb")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    return run_stage("evaluate_distilled", partial(
        evaluate_distilled.run, make_engine=partial(engine_from_args, args), model_manifest=args.model_manifest,
        arm=args.arm, decode=args.decode, test=args.test, heldout=args.heldout, out_answers=args.out_answers,
        out=args.out))


if __name__ == "__main__":
    raise SystemExit(main())
