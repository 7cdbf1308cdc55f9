"""rank: the population's train answers (evaluate_shard or race_slice tables) -> ranking table (parquet) and top-k lists (JSON).
The stage: randopt/stages/rank.py."""
from __future__ import annotations

import argparse
from functools import partial

from randopt.runtime.cli import json_arg, run_stage
from randopt.stages import rank


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m scripts.rank", description=__doc__)
    p.add_argument("--shards", nargs="+", required=True, help="evaluate_shard parquet files")
    p.add_argument("--n-seeds", type=int, required=True)
    p.add_argument("--sigmas", type=float, nargs="+", required=True)
    p.add_argument("--fractions", type=float, nargs="+", required=True)
    p.add_argument("--n-train", type=int, required=True, help="problems in the frozen train split")
    p.add_argument("--selection", type=json_arg, required=True, help="JSON: the config's selection block")
    p.add_argument("--rounds", nargs="*", default=[],
                   help="racing: the race_round survivors files, round 0 first (none for full evaluation)")
    p.add_argument("--ranking", required=True, help="output parquet")
    p.add_argument("--topk", required=True, help="output JSON")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    return run_stage("rank", partial(rank.run, **vars(args)))


if __name__ == "__main__":
    raise SystemExit(main())
