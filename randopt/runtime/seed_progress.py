"""A train-scoring job's progress, one structured line a finished seed in its log, and the reader of them.

A line is `seed-done {"seed": 3, "sigma": 0.001, "reward": 0.5, "seconds": 1.2}` after the logger's prefix
(time, stage, level): JSON after a fixed marker, so `make status` (randopt/stages/status.py) reads the
numbers without a pattern over prose, and a person reading the log still sees them plainly. seconds is
null for a seed read back from the answer cache (nothing was generated for it).
"""
from __future__ import annotations

import json

MARKER = "seed-done "


def line(seed: int, sigma: float, reward: float, seconds: float | None) -> str:
    """The log line of one finished seed."""
    return MARKER + json.dumps({"seed": int(seed), "sigma": float(sigma), "reward": round(float(reward), 6),
                                "seconds": None if seconds is None else round(float(seconds), 3)})


def finished(text: str) -> dict[int, float | None]:
    """seed -> its seconds (None: read back from the cache) of every seed a log reports finished; a line cut
    short (a job killed while writing it) is skipped."""
    seeds = {}
    for row in text.splitlines():
        _, marker, payload = row.partition(MARKER)
        if not marker:
            continue
        try:
            entry = json.loads(payload)
        except json.JSONDecodeError:
            continue
        seeds[int(entry["seed"])] = entry["seconds"]
    return seeds
