"""race_slice: one chunk of the racing members answers one round's slice of the train problems
(selection.mode racing; the plan: randopt/selection/plan.py). Answers come from and go to the answer
cache (randopt/scoring/answer_cache.py), so a (member, problem) pair is generated at most once,
whatever the mode."""
from __future__ import annotations

import time
from collections.abc import Callable

import pandas as pd

from randopt.engines.base import Engine
from randopt.io import InputError, atomic_path, read_json, read_jsonl, verify_against_manifest, write_json_atomic
from randopt.runtime.log import log
from randopt.runtime.progress import progress
from randopt.scoring import answer_blocks, answer_cache, dispatch
from randopt.scoring.scorer import DecodeSpec, Scorer
from randopt.selection.chunks import chunk_members, read_racing
from randopt.selection.plan import RacePlan
from randopt.stages.evaluate_shard import scoring_timings
from randopt.tasks import registry
from randopt.runtime.cli import run_stage
from randopt.runtime.engine_args import add_engine_args, engine_makers_from_args, stage_kwargs
from randopt.block_files import block_arg
from randopt.stages._args import stage_parser


def parse_args(argv=None):
    p = stage_parser("race_slice", __doc__, "--decode-file", "--train", "--timings")
    add_engine_args(p)
    p.add_argument("--plan-file", dest="plan", type=block_arg(RacePlan.from_json), required=True,
                   help="a JSON file holding the racing plan rules/common.smk made (randopt/selection/plan.py RacePlan)")
    p.add_argument("--round", dest="round_index", type=int, required=True, help="the round (0 first)")
    p.add_argument("--chunk", type=int, required=True, help="which chunk of the round's racing members (0 first)")
    p.add_argument("--survivors", default=None, help="the previous round's survivors JSON (not in round 0)")
    p.add_argument("--cache-dir", required=True, help="the answer cache shared with evaluate_shard")
    p.add_argument("--out", required=True, help="parquet: the chunk's rows on the round's problems")
    return p.parse_args(argv)


def run(*, make_engines: list[Callable[[], Engine]], decode: dict, train: str, plan: RacePlan, round_index: int, chunk: int,
        survivors: str | None, cache_dir: str, out: str, timings: str) -> None:
    started_at, start = time.time(), time.perf_counter()
    verify_against_manifest(train)
    problems = read_jsonl(train, required=("id", "question", "answer"))
    if len(problems) != plan.n_problems:
        raise InputError(f"{train} holds {len(problems)} problems, the racing plan {plan.n_problems}: the plan comes "
                         f"from another config")
    slices = plan.slices()
    if not 0 <= round_index < len(slices):
        raise InputError(f"round {round_index}: the plan for {len(problems)} train problems has rounds 0.."
                         f"{len(slices) - 1}")
    if (round_index > 0) != (survivors is not None):
        raise InputError("round 0 races the whole population (no --survivors); a later round needs the previous "
                         "round's survivors")
    racing = read_racing(read_json(survivors) if survivors else None, plan.population)
    members = chunk_members(racing, chunk, plan.population.shard_size, plan.parallel)
    slice_ = slices[round_index]
    log.info("round %d chunk %d: %d of %d racing members on %d problems", round_index, chunk, len(members),
             len(racing), len(slice_))
    blocks = answer_blocks.blocks(len(problems), plan.config.order_seed, plan.answer_block)
    scorers = [Scorer(maker, problems, DecodeSpec.from_config(decode), cache_dir, blocks, registry.of_split(train))
               for maker in make_engines]
    answered = dispatch.over_scorers(scorers, members, lambda scorer, m: [(m, scorer.answers(*m, slice_))])
    frames = dict(progress(answered, total=len(members), desc=f"round {round_index}", unit="member"))
    table = (pd.concat([frames[m] for m in members], ignore_index=True) if frames   # members' order, whoever answered
             else answer_cache.empty_table())
    with atomic_path(out) as tmp:
        table.to_parquet(tmp, index=False)
    write_json_atomic(timings, scoring_timings("race_slice", scorers, table, started_at, start)
                      | {"round": round_index, "chunk": chunk, "members": len(members)})


def main(argv=None) -> int:
    args = parse_args(argv)
    # the engine makers inside the stage: a bad --engines-in-job is the stage's clear error
    return run_stage("race_slice", lambda: run(make_engines=engine_makers_from_args(args), **stage_kwargs(args)))


if __name__ == "__main__":
    raise SystemExit(main())
