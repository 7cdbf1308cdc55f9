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
    """The task a frozen split belongs to, from the manifest.json beside it; a split with no manifest,
    or a GSM8K manifest (which names no task), is GSM8K."""
    manifest = Path(split_path).parent / "manifest.json"
    spec = read_json(manifest).get("task") if manifest.is_file() else None
    return make(spec or {"kind": "gsm8k"})
