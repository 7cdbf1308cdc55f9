"""evaluate_shard: score seeds [first, last] at one sigma on every train problem; one parquet row per
(seed, problem). Seeds are the unit of reuse: a larger population only adds shards.

Each seed's answers go to the answer cache (randopt/scoring/answer_cache.py) as soon as the seed is done, and
only the (seed, problem) pairs not cached are generated: a killed shard resumes at its first unfinished
seed, and the answers a racing run left are reused. The shard's table is assembled from the cache."""
from __future__ import annotations

import time
from collections.abc import Callable

import pandas as pd

from randopt.scoring import answer_blocks, answer_cache
from randopt.runtime.log import log
from randopt.runtime.engine_args import engine_compute_dtype
from randopt.engines.base import Engine
from randopt.scoring.scorer import Scorer, DecodeSpec
from randopt.engines.switch import engine_drift
from randopt.io import atomic_path, read_jsonl, verify_against_manifest, write_json_atomic
from randopt.runtime.progress import progress
from randopt.tasks import registry


def run(*, make_engine: Callable[[], Engine], decode: dict, train: str, sigma: float, first_seed: int,
        last_seed: int, block_size: int | None, order_seed: int, cache_dir: str, out: str, timings: str) -> None:
    if last_seed < first_seed or first_seed < 0:
        raise ValueError(f"bad seed range {first_seed}..{last_seed}")
    started_at, start = time.time(), time.perf_counter()
    verify_against_manifest(train)
    problems = read_jsonl(train, required=("id", "question", "answer"))
    scorer = Scorer(make_engine, problems, DecodeSpec.from_config(decode), cache_dir,
                          answer_blocks.blocks(len(problems), order_seed, block_size), registry.of_split(train))
    everything = range(len(problems))
    frames = []
    seeds = range(first_seed, last_seed + 1)
    for seed in progress(seeds, total=len(seeds), desc=f"sigma {sigma:g}", unit="seed"):
        before, t0 = scorer.slots_evaluated, time.perf_counter()
        frame = scorer.answers(seed, sigma, everything)
        # randopt/runtime/status.py reads these lines: "(T s)" for a seed generated now, "(cached)" for one read back
        if scorer.slots_evaluated > before:
            log.info("seed %d sigma %g: reward %.3f (%.1f s)", seed, sigma, frame["correct"].mean(),
                     time.perf_counter() - t0)
        else:
            log.info("seed %d sigma %g: reward %.3f (cached)", seed, sigma, frame["correct"].mean())
        frames.append(frame)
    table = pd.concat(frames, ignore_index=True)
    with atomic_path(out) as tmp:
        table.to_parquet(tmp, index=False)
    write_json_atomic(timings, scoring_timings("evaluate_shard", scorer, table, started_at, start)
                      | {"sigma": sigma, "seeds": [first_seed, last_seed]})


def scoring_timings(stage: str, scorer: Scorer, table: pd.DataFrame, started_at: float, start: float) -> dict:
    """A train-scoring job's timings: what the record's throughput and stage times read.

    switch_s, generate_s and gen_tokens cover the answers in the table, whenever they were generated (a
    resumed seed keeps the times of the run that generated it); slots_evaluated and members_evaluated
    count what this job generated itself, engine_started whether it needed an engine at all, and
    engine_reused whether that engine was a resident one already loaded (randopt/runtime/resident/)."""
    evaluations = answer_cache.per_evaluation(table)
    return {
        "stage": stage, "load_s": scorer.load_s, "switch_s": float(evaluations["switch_s"].sum()),
        "generate_s": float(evaluations["generate_s"].sum()), "gen_tokens": int(table["n_tokens"].sum()),
        "slots": len(table), "slots_evaluated": scorer.slots_evaluated,
        "members_evaluated": [list(m) for m in scorer.members_evaluated], "engine_started": scorer.engine is not None,
        "engine_reused": bool(getattr(scorer.engine, "reused", False)),
        "seconds": time.perf_counter() - start,
        "compute_dtype": engine_compute_dtype(scorer.engine) if scorer.engine is not None else None,
        "drift": engine_drift(scorer.engine),
        # Epoch seconds, so the record can take the stage's wall-clock span over its jobs.
        "started_at": started_at, "ended_at": time.time(),
    }
