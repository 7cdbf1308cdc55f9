"""rank: all shards of the population -> ranking table (parquet) and top-k lists (JSON)."""
from __future__ import annotations

import time

import pandas as pd

from randopt.io import InputError, atomic_path, write_json_atomic
from randopt.rank import rank_population, top_k


def run(*, shards: list[str], n_seeds: int, sigmas: list[float], fractions: list[float], ranking: str,
        topk: str) -> None:
    start = time.perf_counter()
    try:
        rows = pd.concat([pd.read_parquet(s, columns=["seed", "sigma", "correct", "n_tokens"]) for s in shards],
                         ignore_index=True)
    except FileNotFoundError as err:
        raise InputError(f"missing shard: {err.filename}") from err
    ranked = rank_population(rows, n_seeds, sigmas)
    lists = top_k(ranked, fractions)
    with atomic_path(ranking) as tmp:
        ranked.to_parquet(tmp, index=False)
    write_json_atomic(topk, {"stage": "rank", "population": len(ranked), "n_seeds": n_seeds, "sigmas": sigmas,
                             "topk": lists, "seconds": time.perf_counter() - start})
