"""A task by its kind: the config's task.kind, or the "task" a frozen split's manifest names.

A task is imported only when asked for, so its code enters only its own runs' keys (randopt/keys.py adds
it): editing Countdown must not rerun a GSM8K search.
"""
from __future__ import annotations

import importlib
from collections.abc import Mapping
from pathlib import Path

from randopt.io import InputError, read_json
from randopt.schema import task_kind
from randopt.tasks.base import Task

KINDS = ("gsm8k", "countdown", "math", "code", "jsonl")


def module_name(kind: str) -> str:
    if kind not in KINDS:
        raise InputError(f"unknown task kind {kind!r}; use one of {list(KINDS)}")
    return f"randopt.tasks.{kind}"


def make(spec: Mapping) -> Task:
    """The task of a spec {"kind": ..., **its block}."""
    kind = spec.get("kind") if isinstance(spec, Mapping) else None
    module = importlib.import_module(module_name(kind))
    return module.TASK_CLASS({k: v for k, v in spec.items() if k != "kind"})


def of_split(split_path: str | Path) -> Task:
    """The task a frozen split belongs to, from the manifest.json beside it (randopt/tasks/freeze.py writes it);
    a JSONL file given by hand with no manifest is of the schema's default task kind."""
    manifest = Path(split_path).parent / "manifest.json"
    written = read_json(manifest) if manifest.is_file() else {}
    return make(written.get("task") or {"kind": task_kind(written)})
