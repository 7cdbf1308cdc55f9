"""Score given completions with a task's reward (python -m randopt.stages.score_answers): check an extraction
on your own data, or score another system's answers in a bench, with no model and no workflow."""
from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from randopt.io import InputError, numbered_jsonl
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
    {"id", "completion"}. A bad row of either file is an InputError naming its file and line."""
    problems: dict[str, tuple[int, dict]] = {}
    for line, problem in numbered_jsonl(problems_path, required=("id",)):
        first = problems.setdefault(str(problem["id"]), (line, problem))[0]
        if first != line:
            raise InputError(f"{problems_path}:{line}: id {problem['id']!r} is also the id of line {first}; "
                             f"each problem needs an id of its own")
    completions = numbered_jsonl(completions_path, required=("id", "completion"))
    for line, c in completions:
        if str(c["id"]) not in problems:
            raise InputError(f"{completions_path}:{line}: id {c['id']!r} is not in {problems_path}; each "
                             f"completion's id names a problem there")
        if not isinstance(c["completion"], str):
            raise InputError(f"{completions_path}:{line}: \"completion\" is a {type(c['completion']).__name__}; "
                             f"it must be the model's text, a string")
    texts = [c["completion"] for _, c in completions]
    chosen = [problems[str(c["id"])] for _, c in completions]
    rewards = _score_all(task, texts, chosen, problems_path)
    return [{"id": str(c["id"]), "answer": task.extract(text), "reward": r.value, "reason": r.reason}
            for (_, c), text, r in zip(completions, texts, rewards)]


def _score_all(task: Task, texts: list[str], chosen: list[tuple[int, dict]], problems_path) -> list:
    """task.score_all, where a problem row the reward cannot read (a field missing or of the wrong type)
    is an InputError naming its line: found by scoring row by row once the whole batch failed."""
    rows = [problem for _, problem in chosen]
    try:
        return task.score_all(texts, rows)
    except (KeyError, TypeError, ValueError, AttributeError) as batch_err:
        for text, (line, problem) in zip(texts, chosen):
            try:
                task.score_all([text], [problem])
            except (KeyError, TypeError, ValueError, AttributeError) as err:
                fix = (f"the row lacks the field {err}, which the {task.kind} reward reads; add it (a frozen "
                       f"split has every field)" if isinstance(err, KeyError)
                       else f"the {task.kind} reward cannot read it ({type(err).__name__}: {err}); check its "
                            f"fields against the task's (docs/tasks.md)")
                raise InputError(f"{problems_path}:{line}: problem {problem['id']!r}: {fix}") from err
        raise batch_err


def format_rows(rows: list[dict]) -> str:
    """Tab-separated, a header first; an answer over one line is shown with its newlines escaped."""
    def cell(value):
        return "" if value is None else str(value).replace("\t", " ").replace("\n", "\\n")
    lines = ["id\tanswer\treward\treason"]
    lines += [f"{cell(r['id'])}\t{cell(r['answer'])}\t{r['reward']:g}\t{cell(r['reason'])}" for r in rows]
    return "\n".join(lines) + "\n"
