"""A task by its kind: the config's task.kind, or the "task" a frozen split's manifest names.

GSM8K is imported here (it is the default, and a manifest written before tasks existed names none);
the other tasks are imported only when asked for, so their code enters only their own runs' keys
(randopt/keys.py adds it): editing Countdown must not rerun a GSM8K search.
"""
from __future__ import annotations

import importlib
from collections.abc import Mapping
from pathlib import Path

from randopt.io import InputError, read_json
from randopt.schema import task_kind
from randopt.tasks import gsm8k
from randopt.tasks.base import Task

KINDS = ("gsm8k", "countdown", "math", "code", "jsonl")


def module_name(kind: str) -> str:
    if kind not in KINDS:
        raise InputError(f"unknown task kind {kind!r}; use one of {list(KINDS)}")
    return f"randopt.tasks.{kind}"


def make(spec: Mapping) -> Task:
    """The task of a spec {"kind": ..., **its block}."""
    kind = spec.get("kind") if isinstance(spec, Mapping) else None
    module = gsm8k if kind == "gsm8k" else importlib.import_module(module_name(kind))
    return module.TASK_CLASS({k: v for k, v in spec.items() if k != "kind"})


def of_split(split_path: str | Path) -> Task:
    """The task a frozen split belongs to, from the manifest.json beside it; a split with no manifest, or
    one frozen before GSM8K's manifests named their task, is of the default kind (GSM8K)."""
    manifest = Path(split_path).parent / "manifest.json"
    written = read_json(manifest) if manifest.is_file() else {}
    return make(written.get("task") or {"kind": task_kind(written)})
