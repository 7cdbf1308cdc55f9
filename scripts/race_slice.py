"""race_slice: one chunk of the racing members answers one round's slice of the train problems.
The stage: randopt/stages/race_slice.py."""
from __future__ import annotations

import argparse

from randopt.runtime.cli import add_decode_args, run_stage
from randopt.runtime.engine_args import add_engine_args, engine_makers_from_args
from randopt.selection.plan import RacePlan
from randopt.stages import race_slice


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m scripts.race_slice", description=__doc__)
    add_engine_args(p)
    add_decode_args(p)
    p.add_argument("--train", required=True, help="frozen train split (JSONL)")
    p.add_argument("--plan", type=RacePlan.from_json, required=True,
                   help="JSON: the racing plan rules/common.smk made (randopt/selection/plan.py RacePlan)")
    p.add_argument("--round", type=int, required=True, help="the round (0 first)")
    p.add_argument("--chunk", type=int, required=True, help="which chunk of the round's racing members (0 first)")
    p.add_argument("--survivors", default=None, help="the previous round's survivors JSON (not in round 0)")
    p.add_argument("--cache-dir", required=True, help="the answer cache shared with evaluate_shard")
    p.add_argument("--out", required=True, help="parquet: the chunk's rows on the round's problems")
    p.add_argument("--timings", required=True, help="JSON with load/switch/generate seconds")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    # the engine makers inside the stage: a bad --engines-in-job is the stage's clear error
    return run_stage("race_slice", lambda: race_slice.run(
        make_engines=engine_makers_from_args(args), decode=args.decode, train=args.train,
        plan=args.plan, round_index=args.round, chunk=args.chunk, survivors=args.survivors, cache_dir=args.cache_dir,
        out=args.out, timings=args.timings))


if __name__ == "__main__":
    raise SystemExit(main())
