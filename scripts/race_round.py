"""race_round: decide which racing members go on after a round. The stage: randopt/stages/race_round.py."""
from __future__ import annotations

import argparse
from functools import partial

from randopt.runtime.cli import run_stage
from randopt.selection.plan import RacePlan
from randopt.stages import race_round


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m scripts.race_round", description=__doc__)
    p.add_argument("--tables", nargs="+", required=True, help="race_slice tables of this round and every earlier one")
    p.add_argument("--survivors-in", default=None, help="the previous round's survivors JSON (not in round 0)")
    p.add_argument("--plan", type=RacePlan.from_json, required=True,
                   help="JSON: the racing plan rules/common.smk made (randopt/selection/plan.py RacePlan)")
    p.add_argument("--round", type=int, required=True)
    p.add_argument("--out", required=True, help="JSON: keep, dropped, the round's report")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    return run_stage("race_round", partial(
        race_round.run, tables=args.tables, survivors_in=args.survivors_in, plan=args.plan, round_index=args.round,
        out=args.out))


if __name__ == "__main__":
    raise SystemExit(main())
