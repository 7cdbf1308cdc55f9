"""Rank the population by train reward and cut the top-k lists.

Order: reward (mean exact-answer correctness on the train split) descending; ties broken by fewer
generated tokens (a terser model that is as right), then by sigma and seed ascending, so the order is
a total, deterministic function of the shard tables.
"""
from __future__ import annotations

import pandas as pd

from randopt.config import topk_size
from randopt.io import InputError


def rank_population(rows: pd.DataFrame, n_seeds: int, sigmas: list[float]) -> pd.DataFrame:
    """One row per (seed, sigma): reward, tokens, rank (1 = best). Checks the population is whole."""
    per_member = (rows.groupby(["seed", "sigma"], as_index=False)
                  .agg(train_reward=("correct", "mean"), n_problems=("correct", "size"),
                       gen_tokens=("n_tokens", "sum")))
    expected = {(s, float(g)) for s in range(n_seeds) for g in sigmas}
    found = set(zip(per_member["seed"], per_member["sigma"]))
    missing = sorted(expected - found)
    if missing:
        raise InputError(f"{len(missing)} population members have no shard rows (first: seed {missing[0][0]}, "
                         f"sigma {missing[0][1]}); rerun evaluate_shard for them")
    counts = set(per_member["n_problems"])
    if len(counts) != 1:
        raise InputError(f"members were scored on different numbers of problems {sorted(counts)}: shards from "
                         f"different train splits were mixed")
    per_member = per_member[[(s, g) in expected for s, g in zip(per_member["seed"], per_member["sigma"])]]
    ranked = per_member.sort_values(["train_reward", "gen_tokens", "sigma", "seed"],
                                    ascending=[False, True, True, True], kind="mergesort").reset_index(drop=True)
    ranked.insert(0, "rank", range(1, len(ranked) + 1))
    return ranked


def top_k(ranked: pd.DataFrame, fractions: list[float]) -> list[dict]:
    """The top-k lists, one per fraction, members in rank order."""
    lists = []
    for fraction in fractions:
        k = topk_size(fraction, len(ranked))
        head = ranked.head(k)
        lists.append({"fraction": float(fraction), "k": k, "members": [
            {"seed": int(r.seed), "sigma": float(r.sigma), "train_reward": float(r.train_reward), "rank": int(r.rank)}
            for r in head.itertuples()]})
    return lists


def union_members(topk_lists: list[dict]) -> list[tuple[int, float]]:
    """Every member of any list, once, best-ranked first."""
    seen: dict[tuple[int, float], int] = {}
    for lst in topk_lists:
        for m in lst["members"]:
            seen.setdefault((m["seed"], m["sigma"]), m["rank"])
    return sorted(seen, key=seen.get)
