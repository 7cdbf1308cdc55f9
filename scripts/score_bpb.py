"""score_bpb: realized-token log-probabilities of the held-out text for the base model and every top-k
member (cached per member), then bits per byte for the base and for each top-k ensemble.
The stage: randopt/stages/score_bpb.py."""
from __future__ import annotations

import argparse
from functools import partial

from randopt.runtime.cli import run_stage
from randopt.runtime.engine_args import add_engine_args, engine_from_args
from randopt.stages import score_bpb


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m scripts.score_bpb", description=__doc__)
    add_engine_args(p)
    p.add_argument("--heldout", required=True, help="held-out text slice (JSONL with 'text')")
    p.add_argument("--topk", required=True, help="rank's top-k JSON")
    p.add_argument("--cache-dir", required=True, help="content-addressed per-member log-probabilities")
    p.add_argument("--out", required=True, help="JSON")
    p.add_argument("--max-context", type=int, default=None,
                   help="scoring window in tokens (heldout.max_context; default: the engine's own max_context)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    return run_stage("score_bpb", partial(score_bpb.run, make_engine=partial(engine_from_args, args),
                                          heldout=args.heldout, topk=args.topk, cache_dir=args.cache_dir, out=args.out,
                                          max_context=args.max_context))


if __name__ == "__main__":
    raise SystemExit(main())
