"""race_round: after round r's slices, decide which racing members go on (randopt/selection/race_stops.py
survivors()); writes the survivors and the round's report, which rank and the record show."""
from __future__ import annotations

import time
from functools import partial

import pandas as pd

from randopt.io import InputError, read_json, write_json_atomic
from randopt.selection.chunks import read_racing
from randopt.selection.plan import RacePlan
from randopt.selection.race_stops import survivors as decide_round
from randopt.runtime.cli import run_stage
from randopt.block_files import block_arg
from randopt.stages._args import stage_parser


def parse_args(argv=None):
    p = stage_parser("race_round", __doc__)
    p.add_argument("--tables", nargs="+", required=True, help="race_slice tables of this round and every earlier one")
    p.add_argument("--survivors-in", default=None, help="the previous round's survivors JSON (not in round 0)")
    p.add_argument("--plan-file", dest="plan", type=block_arg(RacePlan.from_json), required=True,
                   help="a JSON file holding the racing plan rules/common.smk made (randopt/selection/plan.py RacePlan)")
    p.add_argument("--round", dest="round_index", type=int, required=True)
    p.add_argument("--out", required=True, help="JSON: keep, dropped, the round's report")
    return p.parse_args(argv)


def run(*, tables: list[str], survivors_in: str | None, plan: RacePlan, round_index: int, out: str) -> None:
    start = time.perf_counter()
    racing = read_racing(read_json(survivors_in) if survivors_in else None, plan.population)
    rows = pd.concat([pd.read_parquet(t, columns=["seed", "sigma", "problem", "correct"]) for t in tables],
                     ignore_index=True)
    racing_index = pd.MultiIndex.from_tuples(racing, names=["seed", "sigma"])
    rows = rows[pd.MultiIndex.from_frame(rows[["seed", "sigma"]]).isin(racing_index)]
    answered = set(zip(rows["seed"], rows["sigma"]))
    absent = [m for m in racing if m not in answered]
    if absent:
        raise InputError(f"{len(absent)} racing members have no rows in the round tables (first: seed {absent[0][0]} "
                         f"sigma {absent[0][1]}): rerun race_slice for round {round_index}")
    decision = decide_round(rows.astype({"correct": "int64"}), plan.k, plan.config, plan.n_problems)
    if decision.report["round"] != round_index:
        raise InputError(f"the tables hold {decision.report['problems_seen']} problems per member, round "
                         f"{decision.report['round']} of the plan {list(plan.checkpoints)}, not round {round_index}")
    write_json_atomic(out, {"stage": "race_round", "round": round_index, "k": plan.k,
                            "keep": [list(m) for m in decision.keep], "dropped": [list(m) for m in decision.dropped],
                            "report": decision.report, "seconds": time.perf_counter() - start})


def main(argv=None) -> int:
    return run_stage("race_round", partial(run, **vars(parse_args(argv))))


if __name__ == "__main__":
    raise SystemExit(main())
