"""Rank the population by train reward and cut the top-k lists.

Order: complete members first (under racing, members that stopped early are partial and rank last);
then reward (mean exact-answer correctness on the train split) descending; ties broken by fewer
generated tokens (a terser model that is as right), then by sigma and seed ascending, so the order is
a total, deterministic function of the shard tables.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from randopt.population import topk_size
from randopt.io import InputError


def rank_population(rows: pd.DataFrame, n_seeds: int, sigmas: list[float], n_train: int | None = None) -> pd.DataFrame:
    """One row per (seed, sigma): reward, problems answered, tokens, partial, rank (1 = best). Checks the
    population is whole.

    Full evaluation (n_train None): every member answered the same number of problems. Racing (n_train
    given): members that answered all n_train problems are complete and ranked as full evaluation ranks
    them; members that stopped early are partial, their reward over the problems they answered, and
    rank below every complete member (a partial reward is never compared with a complete one)."""
    per_member = (rows.groupby(["seed", "sigma"], as_index=False)
                  .agg(train_reward=("correct", "mean"), n_problems=("correct", "size"),
                       gen_tokens=("n_tokens", "sum")))
    expected = {(s, float(g)) for s in range(n_seeds) for g in sigmas}
    found = set(zip(per_member["seed"], per_member["sigma"]))
    missing = sorted(expected - found)
    if missing:
        raise InputError(f"{len(missing)} population members have no shard rows (first: seed {missing[0][0]}, "
                         f"sigma {missing[0][1]}); rerun evaluate_shard for them")
    per_member = per_member[[(s, g) in expected for s, g in zip(per_member["seed"], per_member["sigma"])]]
    if n_train is None:
        counts = set(per_member["n_problems"])
        if len(counts) != 1:
            raise InputError(f"members were scored on different numbers of problems {sorted(counts)}: shards from "
                             f"different train splits were mixed")
        per_member = per_member.assign(partial=False)
    else:
        beyond = per_member[per_member["n_problems"] > n_train]
        if len(beyond):
            raise InputError(f"member seed {beyond.iloc[0]['seed']} sigma {beyond.iloc[0]['sigma']} answered "
                             f"{beyond.iloc[0]['n_problems']} problems, more than the split's {n_train}: tables "
                             f"from another split were mixed")
        per_member = per_member.assign(partial=per_member["n_problems"] < n_train)
    ranked = per_member.sort_values(["partial", "train_reward", "gen_tokens", "sigma", "seed"],
                                    ascending=[True, False, True, True, True], kind="mergesort").reset_index(drop=True)
    ranked.insert(0, "rank", range(1, len(ranked) + 1))
    return ranked


def top_k(ranked: pd.DataFrame, fractions: list[float]) -> list[dict]:
    """The top-k lists, one per fraction, members in rank order."""
    lists = []
    complete = int((~ranked["partial"]).sum()) if "partial" in ranked else len(ranked)
    for fraction in fractions:
        k = topk_size(fraction, len(ranked))
        if k > complete:
            raise InputError(f"top-k of {k} members but only {complete} answered every train problem: racing keeps "
                             f"at least the largest k racing to the end, so these tables are incomplete")
        lists.append({"fraction": float(fraction), "k": k, "members": listed(ranked.head(k))})
    return lists


def listed(members: pd.DataFrame) -> list[dict]:
    """Rows of the ranking table as a list's members (top-k and control lists alike), in the rows' order."""
    return [{"seed": int(r.seed), "sigma": float(r.sigma), "train_reward": float(r.train_reward), "rank": int(r.rank)}
            for r in members.itertuples()]


# Fixed, so that a rerun draws the same control members.
RANDOM_VOTE_SEED = 0


def random_k(ranked: pd.DataFrame, fractions: list[float], seed: int = RANDOM_VOTE_SEED) -> list[dict]:
    """controls.random_vote: for each fraction, k members drawn at random from the whole population (top_k's k,
    in top_k's form), the vote without the selection. One seeded permutation of the population, cut at each k,
    so the lists nest as the top-k lists do; the draw depends only on the population, not on the rewards."""
    order = ranked.sort_values(["sigma", "seed"], kind="mergesort")   # the draw must not see the ranking
    drawn = order.iloc[np.random.default_rng(seed).permutation(len(order))]
    sizes = [(fraction, topk_size(fraction, len(ranked))) for fraction in fractions]
    return [{"fraction": float(f), "k": k, "members": listed(drawn.head(k))} for f, k in sizes]
