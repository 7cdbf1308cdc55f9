"""race_slice: one chunk of the racing members answers one round's slice of the train problems
(selection.mode racing; randopt/racing.py). Answers come from and go to the answer cache
(randopt/answer_cache.py), so a (member, problem) pair is generated at most once, whatever the mode."""
from __future__ import annotations

import time
from collections.abc import Callable

import pandas as pd

from randopt import answer_blocks, answer_cache
from randopt.cli import log
from randopt.engines.base import Engine
from randopt.evaluate import CachedScorer, DecodeSpec
from randopt.io import InputError, atomic_path, read_json, read_jsonl, verify_against_manifest, write_json_atomic
from randopt.progress import progress
from randopt.racing import RacingConfig, chunk_members, plan_rounds, read_racing
from randopt.stages.evaluate_shard import scoring_timings


def run(*, make_engine: Callable[[], Engine], decode: dict, train: str, selection: dict, n_seeds: int,
        sigmas: list[float], round_index: int, chunk: int, chunk_size: int, parallel: int, block_size: int | None,
        survivors: str | None, cache_dir: str, out: str, timings: str) -> None:
    started_at, start = time.time(), time.perf_counter()
    config = RacingConfig.from_selection(selection, block_size)
    verify_against_manifest(train)
    problems = read_jsonl(train, required=("id", "question", "answer"))
    slices = plan_rounds(len(problems), config)
    if not 0 <= round_index < len(slices):
        raise InputError(f"round {round_index}: the plan for {len(problems)} train problems has rounds 0.."
                         f"{len(slices) - 1}")
    if (round_index > 0) != (survivors is not None):
        raise InputError("round 0 races the whole population (no --survivors); a later round needs the previous "
                         "round's survivors")
    racing = read_racing(read_json(survivors) if survivors else None, n_seeds, sigmas)
    members = chunk_members(racing, chunk, chunk_size, parallel)
    slice_ = slices[round_index]
    log.info("round %d chunk %d: %d of %d racing members on %d problems", round_index, chunk, len(members),
             len(racing), len(slice_))
    scorer = CachedScorer(make_engine, problems, DecodeSpec.from_config(decode), cache_dir,
                          answer_blocks.blocks(len(problems), config.order_seed, block_size))
    frames = []
    for seed, sigma in progress(members, total=len(members), desc=f"round {round_index}", unit="member"):
        frames.append(scorer.answers(seed, sigma, slice_))
    table = pd.concat(frames, ignore_index=True) if frames else answer_cache.empty_table()
    with atomic_path(out) as tmp:
        table.to_parquet(tmp, index=False)
    write_json_atomic(timings, scoring_timings("race_slice", scorer, table, started_at, start)
                      | {"round": round_index, "chunk": chunk, "members": len(members)})
