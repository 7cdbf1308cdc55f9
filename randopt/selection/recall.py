"""How much of the full run's top-k a racing run's top-k holds: recall, plain and with ties at the cut.

Racing (docs/racing.md) protects the full ranking's rewards, not its tie-break: rewards move in steps of
1/n_train, so many members share the k-th reward, and which of them the full list holds is decided by
fewer generated tokens, then sigma and seed (randopt/selection/ranking.py). Two measures, for one top-k
size k, racing's list R and the full run's list F (both of k members), and every member's reward over
all train problems in the full run, full(m):

- plain recall: |R ∩ F| / k, the same members, tie-break included;
- recall with ties: |{m in R : full(m) >= r_k}| / k, where r_k is the k-th largest full reward. A member
  of R tied at the cut with a member of F is no miss. It is never below the plain recall (every member of
  F has full(m) >= r_k), and it is what racing's guarantees are about.

A member's full reward comes from the full run, not the racing run: under the torch engine both answer
the same blocks, but an engine whose answers depend on a batch's other prompts can reward a member
differently in the two runs (bench/racing/racing.py answer_agreement shows how often).
"""
from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import numpy as np

from randopt.io import InputError
from randopt.records.statistics import REWARD_ATOL

Member = tuple[int, float]


def kth_reward(rewards, k: int) -> float:
    """r_k: the k-th largest of the rewards."""
    values = np.asarray(rewards, dtype=np.float64)
    if not 1 <= k <= values.size:
        raise InputError(f"k = {k} is outside 1..{values.size} (the population)")
    return float(np.sort(values)[::-1][k - 1])


def at_or_above(rewards, kth: float) -> np.ndarray:
    """Which rewards reach the k-th one (ties included, to REWARD_ATOL)."""
    return np.asarray(rewards, dtype=np.float64) >= kth - REWARD_ATOL


def recall_with_ties(listed_full_rewards, kth: float, k: int) -> float:
    """The share of k taken by a list's members whose full reward reaches the k-th (a list shorter than k
    loses the rest): the recall with ties, from the listed members' full rewards."""
    if len(listed_full_rewards) > k:
        raise InputError(f"a top-{k} list has {len(listed_full_rewards)} members")
    return int(at_or_above(listed_full_rewards, kth).sum()) / k


def recall_of_stops(members_at_or_above_kth: int, stopped_at_or_above_kth: int, k: int) -> float:
    """The recall with ties that racing's stops alone leave: a list of k drawn from the members still racing,
    ranked by their full rewards, holds min(k, those at or above r_k that racing did not stop) of them.

    Racing's own list can fall below it only through its ranking of the members it completed: where an
    engine's answers depend on which problems share a batch (vLLM on a GPU), a member's complete reward in
    the racing run differs from the full run's, and the two runs order near ties differently. The gap between
    this and recall is that noise, not racing's decisions (bench/racing/racing.py answer_agreement)."""
    if not 0 <= stopped_at_or_above_kth <= members_at_or_above_kth or k < 1:
        raise InputError(f"stopped {stopped_at_or_above_kth} of {members_at_or_above_kth} members at or above "
                         f"the k-th reward, k {k}: the counts do not fit")
    return min(k, members_at_or_above_kth - stopped_at_or_above_kth) / k


def recall(full: Mapping[Member, float], full_topk: Sequence[Member], racing_topk: Sequence[Member], k: int,
           stopped: Collection[Member] | None = None) -> dict:
    """Both recalls of one top-k list, with what they are made of.

    full: every member's full-run train reward, by (seed, sigma); full_topk, racing_topk: the two runs' top-k
    lists, best first; stopped: the members racing stopped early, where known. Returns k, kth_reward (r_k),
    recall (with ties), recall_plain, recalled (members of R at or above r_k), same_members (|R ∩ F|),
    members_at_or_above_kth (in the whole population: the members among which a top-k list is a choice),
    missed (R's members below r_k, with their full rewards) and, with stopped, stopped_at_or_above_kth and
    recall_of_stops (above)."""
    for name, members in (("full", full_topk), ("racing", racing_topk)):
        if len(members) != k:
            raise InputError(f"the {name} top-{k} list has {len(members)} members")
        unknown = [m for m in members if m not in full]
        if unknown:
            raise InputError(f"{name} top-k members {unknown[:3]} have no full-run reward: the runs ranked "
                             f"different populations")
    kth = kth_reward(list(full.values()), k)
    listed = [float(full[m]) for m in racing_topk]
    reached = at_or_above(listed, kth)
    same = len(set(full_topk) & set(racing_topk))
    reaching = int(at_or_above(list(full.values()), kth).sum())
    result = {"k": k, "kth_reward": kth,
              "recall": recall_with_ties(listed, kth, k), "recall_plain": same / k,
              "recalled": int(reached.sum()), "same_members": same, "members_at_or_above_kth": reaching,
              "missed": [{"seed": int(s), "sigma": float(g), "full_reward": r}
                         for (s, g), r, ok in zip(racing_topk, listed, reached) if not ok]}
    if stopped is None:
        return result
    unknown = [m for m in stopped if m not in full]
    if unknown:
        raise InputError(f"stopped members {unknown[:3]} have no full-run reward: the runs ranked different populations")
    lost = int(at_or_above([full[m] for m in stopped], kth).sum())
    return result | {"stopped_at_or_above_kth": lost, "recall_of_stops": recall_of_stops(reaching, lost, k)}


def stopped_members(ranking) -> list[Member]:
    """The members a racing run stopped early: its ranking table's partial rows (none in a full evaluation's,
    which may lack the column)."""
    if "partial" not in ranking:
        return []
    return [(int(s), float(g)) for s, g, part in zip(ranking["seed"], ranking["sigma"], ranking["partial"]) if part]


def recall_of_full_run(full_ranking, full_topk: list[dict], racing_topk: list[dict], racing_ranking=None) -> dict:
    """Both recalls of each top-k list of a racing run against a full run of the same population, by
    fraction: full_ranking is the full run's ranking table (seed, sigma, train_reward, partial), the two
    *_topk rank's lists (topk.json's "topk"); with the racing run's ranking table, what its stops alone
    leave too (its partial members are the ones it stopped)."""
    if "partial" in full_ranking and full_ranking["partial"].any():
        raise InputError("the full run's ranking has partial members: it is a racing run, not a full evaluation")
    full = {(int(s), float(g)): float(r) for s, g, r in
            zip(full_ranking["seed"], full_ranking["sigma"], full_ranking["train_reward"])}

    def members(lists: list[dict]) -> dict[str, list[Member]]:
        return {repr(float(t["fraction"])): [(int(m["seed"]), float(m["sigma"])) for m in t["members"]] for t in lists}
    full_lists, racing_lists = members(full_topk), members(racing_topk)
    if full_lists.keys() != racing_lists.keys():
        raise InputError(f"the runs cut different top-k fractions: {sorted(full_lists)} vs {sorted(racing_lists)}")
    stopped = None if racing_ranking is None else stopped_members(racing_ranking)
    return {f: recall(full, full_lists[f], racing_lists[f], len(full_lists[f]), stopped) for f in full_lists}
