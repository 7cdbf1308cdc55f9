"""Committed records of bench/results were written before GSM8K's block moved to task.gsm8k (issue 66): a test that
re-plans one of them (its racing plan, its search's shape) reads its config in today's shape. Only the keys that
moved, moved; nothing else is touched, and a config already in today's shape is returned as it is."""
from __future__ import annotations

import copy

PROMPT_KEYS = ("system", "examples", "stop")


def config_as_today(config: dict) -> dict:
    config = copy.deepcopy(config)
    task = config.setdefault("task", {})
    kind = task.get("kind", "gsm8k")
    if "gsm8k" in config:
        task["gsm8k"] = {**config.pop("gsm8k"), **task.get("gsm8k", {})}
    decode = config.get("decode", {})
    moved = {key: decode.pop(key) for key in PROMPT_KEYS if key in decode}
    if moved:
        task[kind] = {**moved, **task.get(kind, {})}
    return config
