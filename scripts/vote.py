"""vote: majority vote of each top-k list on the test split; base accuracy with the same extraction.
The stage: randopt/stages/vote.py."""
from __future__ import annotations

import argparse
from functools import partial

from randopt.runtime.cli import run_stage
from randopt.stages import vote


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m scripts.vote", description=__doc__)
    p.add_argument("--answers", required=True, help="evaluate_members parquet")
    p.add_argument("--topk", required=True, help="rank's top-k JSON")
    p.add_argument("--test", required=True, help="frozen test split (JSONL)")
    p.add_argument("--out", required=True, help="JSON")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    return run_stage("vote", partial(vote.run, **vars(args)))


if __name__ == "__main__":
    raise SystemExit(main())
