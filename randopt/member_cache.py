"""Per-member results kept in a content-addressed folder, so that a new top-k fraction reuses every
member already evaluated. The folder's path carries the key of everything a member's result depends
on (model, split or text, decode settings, engine, code), so a file there is never stale.

switch_weights is the one switch between members (and back to the base model); plan_members is the
one place that says which members a stage needs (the base model and the union of the top-k lists) and
which of them are not cached yet. evaluate_members and score_bpb both use them."""
from __future__ import annotations

from pathlib import Path

from randopt.config import sigma_label
from randopt.engines.base import Engine
from randopt.rank import union_members

BASE = -1  # the seed value that stands for the unperturbed model in tables
Member = tuple[int, float]  # (seed, sigma); (BASE, 0.0) is the unperturbed model


def switch_weights(engine: Engine, seed: int, sigma: float) -> None:
    """Set the engine's weights to member (seed, sigma), or back to the base weights for seed == BASE."""
    if seed == BASE:
        engine.restore_base()
    else:
        engine.set_weights(seed, sigma)


def engine_drift(engine: Engine | None) -> dict | None:
    """The delta switch's drift after this stage's walk (the engine goes back to base to measure it), or
    None: no engine was loaded, or its switch is the exact reconstruct."""
    drift = getattr(engine, "drift", None)
    return drift() if drift is not None else None


def member_label(seed: int, sigma: float) -> str:
    return "base" if seed == BASE else f"seed={seed}_sigma={sigma_label(sigma)}"


def member_path(cache_dir: str | Path, seed: int, sigma: float, suffix: str) -> Path:
    return Path(cache_dir) / f"{member_label(seed, sigma)}{suffix}"


def plan_members(topk_lists: list[dict], cache_dir: str | Path, suffix: str) -> tuple[list[Member], list[Member]]:
    """(every member the stage reports: base first, then the union of the top-k lists in rank order;
    the members among them with no cached result of this suffix yet, to evaluate now)."""
    members = [(BASE, 0.0)] + union_members(topk_lists)
    todo = [m for m in members if not member_path(cache_dir, *m, suffix).is_file()]
    return members, todo
