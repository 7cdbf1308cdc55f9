"""Frozen splits: what every task's problems become before any model answers them (rules/data.smk,
freeze_problems; randopt/tasks/freeze.py turns a task's pools into rows).

Selection is the first n of a seeded permutation of a pool, so a larger n extends a smaller one. A task
with one pool (MATH-500, HumanEval, a single JSONL file) gives train the first n_train of the permutation
and test the next n_test, so the two never share a problem. A split is JSONL of canonical rows
(``canonical_json``): the same problems read from a Hub parquet or a JSONL copy give byte-identical files,
which is what a pinned sha256 checks. The splits and their manifest are written together or not at all,
and a pin is checked before anything is written.
"""
from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from randopt.io import InputError, atomic_path, canonical_json, sha256_bytes
from randopt.schema import check_sha256

SPLITS = ("train", "test")


def select_indices(pool_size: int, n: int, selection_seed: int) -> list[int]:
    """The first n of numpy ``default_rng(selection_seed).permutation(pool_size)``: stable as n grows."""
    return [int(i) for i in np.random.default_rng(selection_seed).permutation(pool_size)[:n]]


def check_selection(n_train: int, n_test: int, selection_seed: int) -> None:
    """Split sizes of at least 1 and a non-negative seed; anything else is an InputError naming the knob."""
    if isinstance(selection_seed, bool) or not isinstance(selection_seed, int) or selection_seed < 0:
        raise InputError(f"selection seed must be a non-negative integer, got {selection_seed!r}")
    for split, n in (("train", n_train), ("test", n_test)):
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise InputError(f"n_{split} must be an integer >= 1 (an empty {split} split is useless), got {n!r}")


def select(pool_sizes: Mapping[str, int], n_train: int, n_test: int, selection_seed: int,
           what: str) -> dict[str, tuple[str, list[int]]]:
    """Which problems each split takes: split -> (the pool it takes them from, their indices in that pool,
    in selection order). pool_sizes: {"train": ..., "test": ...}, or {"all": ...} for a task with one pool.
    what names the source in errors (a task's kind)."""
    check_selection(n_train, n_test, selection_seed)
    wanted = {"train": n_train, "test": n_test}
    if "all" in pool_sizes:
        size = pool_sizes["all"]
        if n_train + n_test > size:
            raise InputError(f"{what}: n_train + n_test = {n_train + n_test} is more than the {size} problems of "
                             f"its source; lower them to sum to at most {size}")
        order = select_indices(size, n_train + n_test, selection_seed)
        return {"train": ("all", order[:n_train]), "test": ("all", order[n_train:])}
    chosen = {}
    for split in SPLITS:
        if wanted[split] > pool_sizes[split]:
            raise InputError(f"{what}: n_{split}={wanted[split]} is larger than the {split} pool "
                             f"({pool_sizes[split]} problems); lower n_{split} to at most {pool_sizes[split]} "
                             "or use a larger source")
        chosen[split] = (split, select_indices(pool_sizes[split], wanted[split], selection_seed))
    return chosen


def rows_to_jsonl(rows: list[dict]) -> bytes:
    """The canonical bytes of a frozen split."""
    return "".join(canonical_json(r) + "\n" for r in rows).encode("utf-8")


def write_splits(rows: Mapping[str, list[dict]], info: Mapping, paths: Mapping[str, str | Path], manifest: str | Path,
                 pinned: Mapping[str, str | None]) -> dict:
    """Write frozen splits (split -> rows) as canonical JSONL at paths[split] and their manifest (each
    split's sha256, size and path, then info), all or nothing: each pinned sha256 (None: unpinned) is
    checked before any file is written. Returns the manifest."""
    paths = {split: Path(paths[split]) for split in SPLITS}
    resolved = [p.resolve() for p in (paths["train"], paths["test"], Path(manifest))]
    if len(set(resolved)) != 3:
        raise InputError(f"train, test and manifest outputs must be three different paths, got {[str(p) for p in resolved]}")
    for split in SPLITS:
        check_sha256(pinned[split], f"pinned {split} sha256")
    data = {split: rows_to_jsonl(rows[split]) for split in SPLITS}
    record: dict[str, Any] = {}
    for split in SPLITS:
        digest = sha256_bytes(data[split])
        if pinned[split] is not None and pinned[split].lower() != digest:
            raise InputError(
                f"{paths[split]}: sha256 of the frozen {split} split is {digest}, but the config pins "
                f"{pinned[split].lower()}; the source or selection changed (nothing was written): "
                "fix the source, or update the pinned sha256 if the change is intended"
            )
        record[split] = {"sha256": digest, "n": len(rows[split]), "path": str(paths[split])}
    record.update(info)
    text = json.dumps(record, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    with contextlib.ExitStack() as stack:
        tmp_train = stack.enter_context(atomic_path(paths["train"]))
        tmp_test = stack.enter_context(atomic_path(paths["test"]))
        tmp_manifest = stack.enter_context(atomic_path(manifest))
        tmp_train.write_bytes(data["train"])
        tmp_test.write_bytes(data["test"])
        tmp_manifest.write_text(text, encoding="utf-8")
    return record
