"""rank: the population's train answers -> ranking table (parquet) and top-k lists (JSON).

Full evaluation reads the evaluate_shard tables; racing reads every round's race_slice tables and the
rounds' decisions (randopt/selection/rules.py). Either way the top-k lists hold members that answered every
train problem, and topk.json says what the selection spent (randopt/selection/summary.py)."""
from __future__ import annotations

import time

import pandas as pd

from randopt.io import InputError, atomic_path, read_json, write_json_atomic
from randopt.selection.summary import selection_summary
from randopt.selection.rank import rank_population, top_k


def run(*, shards: list[str], n_seeds: int, sigmas: list[float], fractions: list[float], n_train: int,
        selection: dict, rounds: list[str], ranking: str, topk: str) -> None:
    start = time.perf_counter()
    racing = selection["mode"] == "racing"
    if racing != bool(rounds):
        raise InputError("racing needs the rounds' survivors files (--rounds); full evaluation takes none")
    try:
        rows = pd.concat([pd.read_parquet(s, columns=["seed", "sigma", "correct", "n_tokens"]) for s in shards],
                         ignore_index=True)
    except FileNotFoundError as err:
        raise InputError(f"missing shard: {err.filename}") from err
    ranked = rank_population(rows, n_seeds, sigmas, n_train if racing else None)
    if not racing and int(ranked["n_problems"].iloc[0]) != n_train:
        raise InputError(f"members answered {int(ranked['n_problems'].iloc[0])} train problems, the split has "
                         f"{n_train}: shards from another split were mixed")
    lists = top_k(ranked, fractions)
    reports = [read_json(r)["report"] for r in rounds]
    with atomic_path(ranking) as tmp:
        ranked.to_parquet(tmp, index=False)
    write_json_atomic(topk, {"stage": "rank", "population": len(ranked), "n_seeds": n_seeds, "sigmas": sigmas,
                             "topk": lists, "selection": selection_summary(ranked, n_train, selection, reports),
                             "seconds": time.perf_counter() - start})
