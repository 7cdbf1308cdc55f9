"""evaluate_shard: score seeds [first, last] at one sigma on the train split; one parquet row per
(seed, problem). Seeds are the unit of reuse: a larger population only adds shards."""
from __future__ import annotations

import time
from collections.abc import Callable

import pandas as pd

from randopt.cli import log
from randopt.engines.args import engine_compute_dtype
from randopt.engines.base import Engine
from randopt.evaluate import DecodeSpec, build_prompts, evaluate_weights
from randopt.member_cache import engine_drift
from randopt.io import atomic_path, read_jsonl, verify_against_manifest, write_json_atomic
from randopt.progress import progress


def run(*, make_engine: Callable[[], Engine], decode: dict, train: str, sigma: float, first_seed: int,
        last_seed: int, out: str, timings: str) -> None:
    if last_seed < first_seed or first_seed < 0:
        raise ValueError(f"bad seed range {first_seed}..{last_seed}")
    started_at, start = time.time(), time.perf_counter()
    verify_against_manifest(train)
    problems = read_jsonl(train, required=("id", "question", "answer"))
    spec = DecodeSpec.from_config(decode)
    engine = make_engine()
    prompts = build_prompts(engine, problems, spec)
    load_s = time.perf_counter() - start
    frames = []
    seeds = range(first_seed, last_seed + 1)
    for seed in progress(seeds, total=len(seeds), desc=f"sigma {sigma:g}", unit="seed"):
        frame = evaluate_weights(engine, prompts, problems, spec, seed, sigma)
        log.info("seed %d sigma %g: reward %.3f (%.1f s)", seed, sigma, frame["correct"].mean(),
                 frame["switch_s"].iloc[0] + frame["generate_s"].iloc[0])
        frames.append(frame)
    table = pd.concat(frames, ignore_index=True)
    with atomic_path(out) as tmp:
        table.to_parquet(tmp, index=False)
    per_seed = table.groupby("seed").first()
    drift = engine_drift(engine)
    write_json_atomic(timings, {
        "stage": "evaluate_shard", "sigma": sigma, "seeds": [first_seed, last_seed],
        "load_s": load_s, "switch_s": float(per_seed["switch_s"].sum()),
        "generate_s": float(per_seed["generate_s"].sum()), "gen_tokens": int(table["n_tokens"].sum()),
        "seconds": time.perf_counter() - start, "compute_dtype": engine_compute_dtype(engine),
        "drift": drift,
        # Epoch seconds, so the record can take the stage's wall-clock span over its shards.
        "started_at": started_at, "ended_at": time.time(),
    })
