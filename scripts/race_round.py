"""race_round: decide which racing members go on after a round. The stage: randopt/stages/race_round.py."""
from __future__ import annotations

import argparse
from functools import partial

from randopt.cli import json_arg, run_stage
from randopt.stages import race_round


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m scripts.race_round", description=__doc__)
    p.add_argument("--tables", nargs="+", required=True, help="race_slice tables of this round and every earlier one")
    p.add_argument("--survivors-in", default=None, help="the previous round's survivors JSON (not in round 0)")
    p.add_argument("--selection", type=json_arg, required=True, help="JSON: the config's selection block (mode racing)")
    p.add_argument("--block-size", type=int, default=0,
                   help="problems per fixed answer block, each one engine call (randopt/answer_blocks.py); 0: one block")
    p.add_argument("--n-train", type=int, required=True, help="problems in the frozen train split")
    p.add_argument("--k", type=int, required=True, help="size of the largest top-k")
    p.add_argument("--n-seeds", type=int, required=True)
    p.add_argument("--sigmas", type=float, nargs="+", required=True)
    p.add_argument("--round", type=int, required=True)
    p.add_argument("--out", required=True, help="JSON: keep, dropped, the round's report")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    return run_stage("race_round", partial(
        race_round.run, tables=args.tables, survivors_in=args.survivors_in, selection=args.selection,
        block_size=args.block_size or None, n_train=args.n_train, k=args.k, n_seeds=args.n_seeds, sigmas=args.sigmas, round_index=args.round,
        out=args.out))


if __name__ == "__main__":
    raise SystemExit(main())
