"""Score given completions with a task's reward (python -m scripts.score_answers): check an extraction
on your own data, or score another system's answers in a bench, with no model and no workflow."""
from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from randopt.io import InputError, read_jsonl
from randopt.schema import ConfigError, validate_block
from randopt.tasks import registry
from randopt.tasks.base import Task


def task_from_arg(text: str) -> Task:
    """--task: a kind ("countdown": its block's defaults) or a JSON object {"kind", **block keys}, the
    block checked against the schema (config/schema.yaml definitions.task_<kind>) with defaults filled."""
    text = text.strip()
    if text.startswith("{"):
        try:
            spec = json.loads(text)
        except json.JSONDecodeError as err:
            raise InputError(f"--task is not valid JSON ({err.msg}): {text!r}") from None
    else:
        spec = {"kind": text}
    if not isinstance(spec, Mapping) or "kind" not in spec:
        raise InputError(f"--task must be a kind or a JSON object with a 'kind', got {text!r}")
    registry.module_name(spec["kind"])  # an unknown kind is an error naming the known ones
    block = {k: v for k, v in spec.items() if k != "kind"}
    if spec["kind"] != "gsm8k":
        if spec["kind"] == "jsonl":
            block.setdefault("path", None)  # the problems come from --problems here
        try:
            validate_block(block, {"$ref": f"#/definitions/task_{spec['kind']}"},
                           lambda path: f"--task key '{'.'.join(map(str, path))}'" if path else "--task")
        except ConfigError as err:
            raise InputError(str(err)) from None
    return registry.make({"kind": spec["kind"], **block})


def score_file(task: Task, problems_path: str | Path, completions_path: str | Path) -> list[dict]:
    """One row per completion, in the completions file's order: {"id", "answer", "reward", "reason"}.
    problems: a frozen split (or any JSONL with "id" and the task's fields); completions: JSONL of
    {"id", "completion"}."""
    problems = {str(p["id"]): p for p in read_jsonl(problems_path, required=("id",))}
    completions = read_jsonl(completions_path, required=("id", "completion"))
    unknown = [str(c["id"]) for c in completions if str(c["id"]) not in problems]
    if unknown:
        raise InputError(f"{completions_path}: ids {unknown[:3]} are not in {problems_path}; each completion's id "
                         f"names a problem there")
    texts = [str(c["completion"]) for c in completions]
    chosen = [problems[str(c["id"])] for c in completions]
    rewards = task.score_all(texts, chosen)
    return [{"id": str(c["id"]), "answer": task.extract(text), "reward": r.value, "reason": r.reason}
            for c, text, r in zip(completions, texts, rewards)]


def format_rows(rows: list[dict]) -> str:
    """Tab-separated, a header first; an answer over one line is shown with its newlines escaped."""
    def cell(value):
        return "" if value is None else str(value).replace("\t", " ").replace("\n", "\\n")
    lines = ["id\tanswer\treward\treason"]
    lines += [f"{cell(r['id'])}\t{cell(r['answer'])}\t{r['reward']:g}\t{cell(r['reason'])}" for r in rows]
    return "\n".join(lines) + "\n"
