"""controls.random_members: M members drawn at random, σ-stratified like the top-k lists, that answer the test
split; the vote stage votes many random k-subsets of them (randopt/records/random_expectation.py) to estimate
what a vote of k random members scores in expectation, not in one draw.

Why stratified: the population mixes σ, and a member's test accuracy depends on its σ far more than on its
seed. One unstratified draw of 19 members once held 7 members at σ 2e-3 against the top-k list's 1 (issue 68),
so its vote measured the σ mix, not the selection. Each k-subset here has exactly its top-k list's count at
each σ, so the top-k vote is compared with random members of the same σ, and the difference is the ranking's
within-σ choice.

The pool: the largest top-k list's count c_σ at each σ, scaled to M members (largest remainders, so the
counts add up to M; never below c_σ, never above the population at that σ). Within a σ the members are a
seeded permutation of the seeds, never the rewards: only the counts follow the ranking.
"""
from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pandas as pd

from randopt.selection.ranking import listed

# Fixed, so that a rerun draws the same pool (randopt/selection/ranking.py RANDOM_VOTE_SEED's reason).
RANDOM_POOL_SEED = 1


def sigma_counts(members: list[dict]) -> dict[float, int]:
    """How many of a list's members sit at each σ."""
    return dict(sorted(Counter(float(m["sigma"]) for m in members).items()))


def pool_sizes(largest: dict[float, int], members: int, available: dict[float, int]) -> dict[float, int]:
    """Per σ, the pool's size: largest[σ] scaled from the list's k to `members` by largest remainders (ties to
    the smaller σ), each at least largest[σ] and at most available[σ]."""
    k = sum(largest.values())
    if members < k:
        raise ValueError(f"controls.random_members {members} is below the largest top-k list's {k} members: "
                         f"a k-subset could not be drawn from the pool")
    exact = {sigma: members * count / k for sigma, count in largest.items()}
    sizes = {sigma: math.floor(share) for sigma, share in exact.items()}
    by_remainder = sorted(exact, key=lambda sigma: (-(exact[sigma] - sizes[sigma]), sigma))
    for sigma in by_remainder[:members - sum(sizes.values())]:
        sizes[sigma] += 1
    return {sigma: min(available[sigma], max(largest[sigma], size)) for sigma, size in sizes.items()}


def random_pool(ranked: pd.DataFrame, topk_lists: list[dict], members: int, seed: int = RANDOM_POOL_SEED) -> dict:
    """{"members": [...] (in the list form of top_k, σ then draw order), "per_sigma": {σ: count}, "seed"}: the
    pool of controls.random_members for rank's top-k lists (the module's docstring says how it is drawn)."""
    largest = sigma_counts(max(topk_lists, key=lambda lst: lst["k"])["members"])
    order = ranked.sort_values(["sigma", "seed"], kind="mergesort")   # the draw must not see the ranking
    available = order.groupby("sigma").size().to_dict()
    sizes = pool_sizes(largest, members, {float(s): int(n) for s, n in available.items()})
    rng = np.random.default_rng(seed)
    drawn = []
    for sigma, size in sizes.items():
        at_sigma = order[order["sigma"] == sigma]
        drawn.append(at_sigma.iloc[rng.permutation(len(at_sigma))[:size]])
    return {"members": listed(pd.concat(drawn)), "per_sigma": {repr(s): n for s, n in sizes.items()}, "seed": seed}
