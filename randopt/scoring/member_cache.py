"""Per-member results kept in a content-addressed folder, so that a new top-k fraction reuses every
member already evaluated. The folder's path carries the key of everything a member's result depends
on (model, split or text, decode settings, engine, code), so a file there is never stale.

plan_members is the one place that says which members a stage needs (the base model and the union of
the top-k lists) and which of them are not cached yet. evaluate_members and score_bpb both use it."""
from __future__ import annotations

from pathlib import Path

from randopt.io import sweep_stale_temps_in
from randopt.population import BASE, Member, sigma_label


def member_label(seed: int, sigma: float) -> str:
    return "base" if seed == BASE else f"seed={seed}_sigma={sigma_label(sigma)}"


def member_path(cache_dir: str | Path, seed: int, sigma: float, suffix: str) -> Path:
    return Path(cache_dir) / f"{member_label(seed, sigma)}{suffix}"


def plan_members(topk_lists: list[dict], cache_dir: str | Path, suffix: str) -> tuple[list[Member], list[Member]]:
    """(every member the stage reports: base first, then the union of the top-k lists in rank order;
    the members among them with no cached result of this suffix yet, to evaluate now)."""
    sweep_stale_temps_in(cache_dir)  # a cached file is never written again, so its dead writer's leftovers go here
    members = [(BASE, 0.0)] + union_members(topk_lists)
    todo = [m for m in members if not member_path(cache_dir, *m, suffix).is_file()]
    return members, todo


def lists_answering_test(ranked: dict) -> list[dict]:
    """The lists of rank's topk.json whose members answer the test split: the top-k lists, the random-vote
    controls (controls.random_vote) and the random pool (controls.random_members)."""
    return ranked["topk"] + ranked.get("controls", []) + ([ranked["random_pool"]] if ranked.get("random_pool") else [])


def union_members(topk_lists: list[dict]) -> list[Member]:
    """Every member of any list, once, best-ranked first."""
    seen: dict[tuple[int, float], int] = {}
    for lst in topk_lists:
        for m in lst["members"]:
            seen.setdefault((m["seed"], m["sigma"]), m["rank"])
    return sorted(seen, key=seen.get)
