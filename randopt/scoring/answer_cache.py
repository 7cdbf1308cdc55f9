"""Each member's train answers, cached per (seed, sigma, problem): the unit of reuse of the search.

A job that scores members on train problems (evaluate_shard in full mode, race_slice in racing mode)
evaluates only the (member, problem) pairs no earlier job has, and writes them the moment a member is
done. So a killed shard resumes at its first unfinished seed, and switching between full evaluation and
racing (or between racing settings) evaluates nothing twice.

Layout, below the evaluation key's folder (results/shards/<eval key>/cache; the key hashes the model,
split, decoding, engine numerics and code, so a file here is never stale):

    sigma=<label>/seed=<n>/part-<hash of its problem indices>.parquet

A part is one evaluation of one member on a set of problems: written atomically, never rewritten. A
member's answers are the union of its parts; `problem` is the problem's row in the frozen train split.
Rows carry the part's switch and generate seconds (the time that evaluation took, the same on each of
its rows) and the part's name, so per-evaluation times can be summed once per part.
"""
from __future__ import annotations

import hashlib
import logging
from pathlib import Path

import numpy as np
import pandas as pd

from randopt.population import sigma_label
from randopt.io import InputError, atomic_path, sweep_stale_temps_in

log = logging.getLogger("randopt")

# The columns of a cached row, in order (the shard tables' columns).
COLUMNS = ["seed", "sigma", "problem", "problem_id", "answer", "correct", "n_tokens", "finish", "completion",
           "switch_s", "generate_s", "part"]


def member_dir(cache_dir: str | Path, seed: int, sigma: float) -> Path:
    return Path(cache_dir) / f"sigma={sigma_label(sigma)}" / f"seed={int(seed)}"


def part_name(problems) -> str:
    """A part's file stem from its problem indices: the same set gives the same name."""
    indices = np.sort(np.asarray(problems, dtype=np.int64))
    return "part-" + hashlib.sha256(indices.tobytes()).hexdigest()[:16]


def empty_table() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in [
        ("seed", "int64"), ("sigma", "float64"), ("problem", "int64"), ("problem_id", "object"),
        ("answer", "object"), ("correct", "bool"), ("n_tokens", "int64"), ("finish", "object"),
        ("completion", "object"), ("switch_s", "float64"), ("generate_s", "float64"), ("part", "object")]})


def load(cache_dir: str | Path, seed: int, sigma: float) -> pd.DataFrame:
    """Every cached answer of one member (empty table if none), one row per problem, sorted by problem.

    Two parts holding the same problem cannot come from one workflow (each job evaluates only what is
    missing), but could from two runs racing on one folder; the part first in name order wins, so the
    answer read is the same every time."""
    folder = member_dir(cache_dir, seed, sigma)
    sweep_stale_temps_in(folder)  # a part is never written again, so its dead writer's leftovers go here
    parts = sorted(folder.glob("part-*.parquet")) if folder.is_dir() else []
    if not parts:
        return empty_table()
    frames = [pd.read_parquet(p) for p in parts]
    table = pd.concat(frames, ignore_index=True)
    missing = set(COLUMNS) - set(table.columns)
    if missing:
        raise InputError(f"{folder}: cached parts lack columns {sorted(missing)} (written by other code?); "
                         f"delete {folder} and rerun")
    duplicated = table.duplicated("problem")
    if duplicated.any():
        log.warning("%s: %d problems cached twice; using the first part's answers", folder, int(duplicated.sum()))
        table = table[~duplicated]
    return table[COLUMNS].sort_values("problem", kind="mergesort").reset_index(drop=True)


def write_part(cache_dir: str | Path, rows: pd.DataFrame) -> pd.DataFrame:
    """Cache one evaluation of one member (rows of a single (seed, sigma)), atomically; the rows as
    cached (with their part name), so a caller can add them to what it loaded without reading again."""
    members = rows[["seed", "sigma"]].drop_duplicates()
    if len(members) != 1:
        raise ValueError(f"a cache part holds one member's rows, got {len(members)} members")
    seed, sigma = int(members.iloc[0]["seed"]), float(members.iloc[0]["sigma"])
    name = part_name(rows["problem"])
    rows = rows.assign(part=name)[COLUMNS]
    path = member_dir(cache_dir, seed, sigma) / f"{name}.parquet"
    with atomic_path(path) as tmp:
        rows.to_parquet(tmp, index=False)
    return rows


def missing_problems(cached: pd.DataFrame, problems) -> list[int]:
    """The problems of `problems` (indices) that have no cached answer, in the given order."""
    have = set(cached["problem"].tolist())
    return [int(p) for p in problems if int(p) not in have]


def per_evaluation(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per evaluation (member, part) with its switch and generate seconds: what timings sum."""
    return rows.drop_duplicates(["seed", "sigma", "part"])[["seed", "sigma", "part", "switch_s", "generate_s"]]
