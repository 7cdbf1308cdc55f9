"""Per-member results kept in a content-addressed folder, so that a new top-k fraction reuses every
member already evaluated. The folder's path carries the key of everything a member's result depends
on (model, split or text, decode settings, engine, code), so a file there is never stale."""
from __future__ import annotations

from pathlib import Path

from randopt.config import sigma_label
from randopt.evaluate import BASE


def member_label(seed: int, sigma: float) -> str:
    return "base" if seed == BASE else f"seed={seed}_sigma={sigma_label(sigma)}"


def member_path(cache_dir: str | Path, seed: int, sigma: float, suffix: str) -> Path:
    return Path(cache_dir) / f"{member_label(seed, sigma)}{suffix}"
