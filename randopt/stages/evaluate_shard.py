"""evaluate_shard: score seeds [first, last] at one sigma on every train problem; one parquet row per
(seed, problem). Seeds are the unit of reuse: a larger population only adds shards.

Each seed's answers go to the answer cache (randopt/scoring/answer_cache.py) as soon as the seed is done, and
only the (seed, problem) pairs not cached are generated: a killed shard resumes at its first unfinished
seed, and the answers a racing run left are reused. The shard's table is assembled from the cache.

member_batch above 1 (engine.member_batch, torch engine): the seeds go in groups of that many, the
members of a group that miss the same problems decoded together (Scorer.answers_many); 1 answers one
seed at a time (Scorer.answers)."""
from __future__ import annotations

import time
from collections.abc import Callable

import pandas as pd

from randopt.scoring import answer_blocks, answer_cache, dispatch
from randopt.runtime.log import log
from randopt.runtime.cli import run_stage
from randopt.runtime.engine_args import (add_engine_args, engine_compute_dtype, engine_makers_from_args,
                                           stage_kwargs)
from randopt.engines.base import Engine
from randopt.scoring.scorer import Scorer, DecodeSpec
from randopt.engines.switch import engine_drift
from randopt.io import atomic_path, read_jsonl, verify_against_manifest, write_json_atomic
from randopt.runtime import seed_progress
from randopt.runtime.progress import progress
from randopt.tasks import registry
from randopt.stages._args import stage_parser


def parse_args(argv=None):
    p = stage_parser("evaluate_shard", __doc__, "--decode-file", "--train", "--timings")
    add_engine_args(p)
    p.add_argument("--sigma", type=float, required=True)
    p.add_argument("--first-seed", type=int, required=True)
    p.add_argument("--last-seed", type=int, required=True, help="inclusive")
    p.add_argument("--batch-size", type=int, default=None,
                   help="engine.batch_size: problems per fixed answer block, each one engine call (randopt/scoring/answer_blocks.py); "
                        "absent: one block")
    p.add_argument("--order-seed", type=int, default=0, help="seed of the problem order the blocks cut (selection.order_seed)")
    p.add_argument("--member-batch", type=int, default=1,
                   help="seeds decoded together, torch engine only (engine.member_batch); 1: one at a time")
    p.add_argument("--cache-dir", required=True,
                   help="the answer cache: each seed's answers are kept there as it finishes, and reused")
    p.add_argument("--out", required=True, help="parquet")
    return p.parse_args(argv)


def run(*, make_engines: list[Callable[[], Engine]], decode: dict, train: str, sigma: float, first_seed: int,
        last_seed: int, batch_size: int | None, order_seed: int, cache_dir: str, out: str, timings: str,
        member_batch: int = 1) -> None:
    """make_engines: the makers of the job's engine, or of its engines side by side inside it
    (randopt/runtime/job_engines.py), which answer the shard's seeds between them."""
    if last_seed < first_seed or first_seed < 0:
        raise ValueError(f"bad seed range {first_seed}..{last_seed}")
    if member_batch < 1:
        raise ValueError(f"member_batch must be at least 1, got {member_batch}")
    started_at, start = time.time(), time.perf_counter()
    verify_against_manifest(train)
    problems = read_jsonl(train, required=("id", "question", "answer"))
    blocks = answer_blocks.blocks(len(problems), order_seed, batch_size)
    scorers = [Scorer(maker, problems, DecodeSpec.from_config(decode), cache_dir, blocks, registry.of_split(train))
               for maker in make_engines]
    seeds = list(range(first_seed, last_seed + 1))
    groups = [seeds[i:i + member_batch] for i in range(0, len(seeds), member_batch)]   # of member_batch seeds
    frames = {}
    everything = range(len(problems))
    answered = dispatch.over_scorers(scorers, groups,
                                     lambda scorer, group: answer_seeds(scorer, group, sigma, everything).items())
    for seed, (frame, seconds) in progress(answered, total=len(seeds), desc=f"sigma {sigma:g}", unit="seed"):
        log.info(seed_progress.line(seed, sigma, frame["correct"].mean(), seconds))   # make status reads it
        frames[seed] = frame
    table = pd.concat([frames[seed] for seed in seeds], ignore_index=True)   # seed order, whoever answered
    with atomic_path(out) as tmp:
        table.to_parquet(tmp, index=False)
    write_json_atomic(timings, scoring_timings("evaluate_shard", scorers, table, started_at, start)
                      | {"sigma": sigma, "seeds": [first_seed, last_seed]})


def answer_seeds(scorer: Scorer, seeds: list[int], sigma: float, problems) -> dict[int, tuple[pd.DataFrame, float | None]]:
    """Each seed's frame and the seconds it took when generated now (a seed decoded with others: an equal
    share of theirs), or None when read back. One seed: Scorer.answers; several: Scorer.answers_many."""
    before, start = len(scorer.members_evaluated), time.perf_counter()
    frames = ([scorer.answers(seeds[0], sigma, problems)] if len(seeds) == 1
              else scorer.answers_many([(seed, sigma) for seed in seeds], problems))
    generated = {seed for seed, _ in scorer.members_evaluated[before:]}
    seconds = (time.perf_counter() - start) / max(1, len(generated))
    return {seed: (frame, seconds if seed in generated else None) for seed, frame in zip(seeds, frames)}


def scoring_timings(stage: str, scorers: list[Scorer], table: pd.DataFrame, started_at: float, start: float) -> dict:
    """A train-scoring job's timings: what the record's throughput and stage times read.

    switch_s, generate_s and gen_tokens cover the answers in the table, whenever they were generated (a
    resumed seed keeps the times of the run that generated it); slots_evaluated and members_evaluated
    count what this job generated itself, engine_started whether it needed an engine at all, and
    engine_reused whether that engine was a resident one already loaded (randopt/runtime/resident/).
    One scorer an engine: with engines side by side inside the job, load_s is the longest load, the counts
    are summed, and engines_in_job says how many and what each answered."""
    started = [s for s in scorers if s.engine is not None]
    first = started[0].engine if started else None
    evaluations = answer_cache.per_evaluation(table)
    timings = {
        "stage": stage, "load_s": max(s.load_s for s in scorers), "switch_s": float(evaluations["switch_s"].sum()),
        "generate_s": float(evaluations["generate_s"].sum()), "gen_tokens": int(table["n_tokens"].sum()),
        "slots": len(table), "slots_evaluated": sum(s.slots_evaluated for s in scorers),
        "members_evaluated": [list(m) for s in scorers for m in s.members_evaluated],
        "engine_started": bool(started), "engine_reused": bool(getattr(first, "reused", False)),
        "seconds": time.perf_counter() - start,
        "compute_dtype": engine_compute_dtype(first) if first is not None else None,
        "drift": engine_drift(first),
        # Epoch seconds, so the record can take the stage's wall-clock span over its jobs.
        "started_at": started_at, "ended_at": time.time(),
    }
    if len(scorers) > 1:
        timings["engines_in_job"] = [{"load_s": s.load_s, "members_evaluated": len(s.members_evaluated)}
                                     for s in scorers]
    return timings


def main(argv=None) -> int:
    args = parse_args(argv)
    # the engine makers inside the stage: a bad --engines-in-job is the stage's clear error
    return run_stage("evaluate_shard", lambda: run(make_engines=engine_makers_from_args(args), **stage_kwargs(args)))


if __name__ == "__main__":
    raise SystemExit(main())
