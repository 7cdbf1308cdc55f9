"""Reading a task's problems from a local JSONL file, strictly: every row a JSON object with the
fields the task needs, each error naming the file and line and saying what to fix."""
from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from randopt.io import InputError, numbered_jsonl


def load_rows(path: str | Path, required: Iterable[str], what: str) -> list[dict]:
    """The rows of one JSONL file; a missing file, a row without a field or an empty file is an error."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: file not found; give {what}")
    required = tuple(required)
    numbered = numbered_jsonl(path, required=required)
    for lineno, row in numbered:
        for key in required:
            value = row[key]
            if value is None or (isinstance(value, str) and not value.strip()):
                raise InputError(f"{path}:{lineno}: '{key}' is empty; fix or remove that row")
    rows = [row for _, row in numbered]
    if not rows:
        raise InputError(f"{path}: no problems in the file; give {what}")
    ids = [str(r["id"]) for r in rows if "id" in r]
    if len(ids) != len(set(ids)):
        raise InputError(f"{path}: ids repeat ({sorted(i for i in set(ids) if ids.count(i) > 1)[:3]}); give each row its own id")
    return rows


def load_pools(path: str | Path, required: Iterable[str], what: str) -> dict[str, list[dict]]:
    """A JSONL file (one pool, split by the freezer) or a directory with train.jsonl and test.jsonl."""
    path = Path(path)
    if path.is_dir():
        return {split: load_rows(path / f"{split}.jsonl", required, what) for split in ("train", "test")}
    return {"all": load_rows(path, required, what)}
