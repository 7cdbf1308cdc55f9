"""Why the search reruns: the answer-changing knobs in which a run differs from the last finished run of its name.

A knob such as engine.batch_size changes answers, so it is in the search's key (randopt/specs.py, randopt/keys.py)
and changing it reruns the whole search, rightly; but Snakemake only says "missing output files". At DAG build
the workflow says it in one line (rules/common.smk): "search reruns (unlike run results/runs/<key>):
engine.batch_size 32 → 16 changes answers".

Which knobs is asked of the keys themselves, not of a list: each value in which the two validated configs differ is
set alone into the finished run's config, and it is named if that moves the search's key (the eval key). So a
knob that only says where or how fast the engine runs (engine.engines_per_gpu, resources) is never named, and a
knob added to the keys later is named without anyone listing it.
"""
from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

from randopt.io import InputError, read_json
from randopt.keys import run_keys
from randopt.paths import RUNS

# one line: a few knobs by name, the rest counted
SHOWN = 4
# what computing a key of a config from an older layout, or of one value set alone, may raise
KEY_ERRORS = (KeyError, TypeError, ValueError, AttributeError)


def leaves(node: Any, prefix: str = "") -> dict[str, Any]:
    """A config's values by their dotted paths (a list is one value)."""
    if not isinstance(node, dict) or not node:
        return {prefix: node}
    found = {}
    for key, value in node.items():
        found |= leaves(value, f"{prefix}.{key}" if prefix else str(key))
    return found


def with_value(config: dict, path: str, value: Any) -> dict:
    """A copy of config with the value at the dotted path set (its dicts made where missing)."""
    changed = copy.deepcopy(config)
    *parents, last = path.split(".")
    node = changed
    for part in parents:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[last] = value
    return changed


def eval_key(config: dict, inputs: dict) -> str:
    return run_keys(config, inputs=inputs)["eval"]


def answer_changes(old: dict, new: dict, old_inputs: dict, new_inputs: dict,
                   key: Callable[[dict, dict], str] = eval_key) -> list[str]:
    """The knobs (and external inputs) in which new differs from old that each alone move old's search key, as
    "engine.batch_size 32 → 16" (and "the model's files")."""
    base = key(old, old_inputs)

    def moves(config: dict, inputs: dict) -> bool:
        try:
            return key(config, inputs) != base
        except KEY_ERRORS:   # a value that makes no config alone (task.kind without its task's block): it differs
            return True

    before, after = leaves(old), leaves(new)
    changes = []
    for path in sorted(before.keys() | after.keys()):
        was, now = before.get(path), after.get(path)
        if was != now and moves(with_value(old, path, now), old_inputs):
            changes.append(f"{path} {_shown(was)} → {_shown(now)}")
    for name in sorted(old_inputs.keys() | new_inputs.keys()):
        if old_inputs.get(name) != new_inputs.get(name) and moves(old, {**old_inputs, name: new_inputs.get(name)}):
            changes.append(f"the {name}'s files")
    return changes


def _shown(value: Any) -> str:
    text = "unset" if value is None else str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def last_run_named(run_name: str | None, directory: str | Path = ".") -> dict | None:
    """The record of the last finished run whose config gives this run_name (None: the default name), by the
    time its record was written; None where there is none."""
    records = sorted((Path(directory) / RUNS).glob("*/record.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    for path in records:
        try:
            record = read_json(path)
        except InputError:   # half-copied or edited by hand: no run to compare with
            continue
        if (record.get("config") or {}).get("run_name") == run_name and record.get("run"):
            return record
    return None


def search_change_note(config: dict, inputs: dict, run_key: str, directory: str | Path = ".") -> str | None:
    """The line the workflow prints where this run's search reruns unlike the last finished run of its name,
    naming the knobs that change answers; None where the search is that run's, or there is none."""
    last = last_run_named(config.get("run_name"), directory)
    if last is None or last["run"]["key"] == run_key:
        return None
    old_inputs = last.get("inputs") or {}
    try:
        if eval_key(last["config"], old_inputs) == eval_key(config, inputs):
            return None
        changes = answer_changes(last["config"], config, old_inputs, inputs)
    except KEY_ERRORS:   # a record of an older layout of the config: no line
        return None
    if not changes:
        return None
    named = ", ".join(changes[:SHOWN]) + (f" and {len(changes) - SHOWN} more" if len(changes) > SHOWN else "")
    return (f"search reruns (unlike run {last['run']['dir']}): {named} "
            f"change{'s' if len(changes) == 1 else ''} answers")
