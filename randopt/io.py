"""Atomic writes, hashing and strict JSONL reading: every stage writes through here, so a failed
stage leaves no half file behind and every bad line is named by file and line number."""
from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import shutil
import socket
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any


class InputError(ValueError):
    """A bad input (file, row, config value); the message names the problem and the fix."""


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, *, is_dir: bool = False) -> Iterator[Path]:
    """Yield a temporary sibling path; on success rename it onto ``path``, on error delete it.

    The rename is atomic on one filesystem, so readers see the old output or the whole new one.
    For ``is_dir`` the yielded path is an empty directory the caller fills (or removes and replaces
    with a symlink).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    owner = f"{socket.gethostname()}.{os.getpid()}"
    sweep_stale_temps(path)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.{owner}.", suffix=".tmp", dir=path.parent))
    if is_dir:
        tmp.chmod(0o755)  # mkdtemp makes it private; a model dir is read by other users and jobs
    target = tmp if is_dir else tmp / path.name
    try:
        yield target
        if is_dir:
            if path.exists():
                shutil.rmtree(path)
            os.replace(tmp, path)
        else:
            os.replace(target, path)
    finally:
        if tmp.is_symlink():
            tmp.unlink()
        elif tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def sweep_stale_temps(path: Path) -> None:
    """Remove the temporaries that writers of ``path`` killed mid-way (kill -9, a lost node) left
    beside it: those named for a process of this host that no longer exists. A live writer's, or one
    from another host (a shared filesystem), is left alone."""
    sweep_stale_temps_in(path.parent, path.name)


def sweep_stale_temps_in(folder: str | os.PathLike, name: str = "") -> None:
    """Remove the temporaries of dead writers of this host in ``folder`` (of the output ``name`` only,
    if given). A cache's reader calls this as well as its writers: a writer killed between its rename
    and its cleanup leaves an empty temporary beside a whole file that no one writes again."""
    folder, host = Path(folder), socket.gethostname()
    if not folder.is_dir():
        return
    for stale in folder.glob(f".{glob.escape(name)}.*.tmp" if name else ".*.tmp"):
        # .<output>.<host>.<pid>.<random>.tmp; the host may hold dots, the random part does not
        head, _, pid = stale.name[:-len(".tmp")].rpartition(".")[0].rpartition(".")
        if not (head.endswith(f".{host}") and pid.isdigit()) or (name and head != f".{name}.{host}"):
            continue
        if not process_alive(int(pid)):
            shutil.rmtree(stale, ignore_errors=True)


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def canonical_json(obj: Any) -> str:
    """One canonical serialisation (sorted keys, no spaces, UTF-8): equal content, equal sha256."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def write_json_atomic(path: str | os.PathLike, obj: Any) -> None:
    write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def write_jsonl_atomic(path: str | os.PathLike, rows: Iterable[dict]) -> None:
    write_text_atomic(path, "".join(canonical_json(r) + "\n" for r in rows))


def read_json(path: str | os.PathLike) -> Any:
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: file not found")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise InputError(f"{path}: not valid JSON ({err}); regenerate or fix the file") from err


def json_object(text: str, where: str, fix: str = "") -> dict:
    """text as one JSON object, or an InputError that starts with where it came from (FILE:LINE, an
    option) and ends with fix."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(f"{where}: malformed JSON ({err.msg} at char {err.pos}){fix}") from err
    if not isinstance(value, dict):
        raise InputError(f"{where}: expected a JSON object, got {type(value).__name__}{fix}")
    return value


def numbered_jsonl(path: str | os.PathLike, required: Iterable[str] = ()) -> list[tuple[int, dict]]:
    """Each row of a JSONL file with its line number, read strictly: a malformed line or a missing key is
    an error naming the line. Blank lines are skipped; the numbers let a caller that checks more (a task's
    fields, repeated ids) name the line too, without reading the file a second time."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: file not found")
    required = tuple(required)
    rows = []
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            row = json_object(line, f"{path}:{lineno}", "; fix or remove that line")
            missing = [k for k in required if k not in row]
            if missing:
                raise InputError(f"{path}:{lineno}: missing key(s) {missing}; every row needs {list(required)}")
            rows.append((lineno, row))
    return rows


def read_jsonl(path: str | os.PathLike, required: Iterable[str] = ()) -> list[dict]:
    """The rows of a JSONL file, read strictly (numbered_jsonl, without the line numbers)."""
    return [row for _, row in numbered_jsonl(path, required)]


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def verify_against_manifest(path: str | os.PathLike) -> None:
    """A frozen input (split, held-out slice) next to the manifest.json that its stage wrote must still
    have the sha256 recorded there: a file edited after it was written is an error naming the file and
    both hashes, not silently different data under the same content key. A file with no manifest
    beside it (a stage CLI run by hand on other data) is not checked."""
    path = Path(path)
    manifest_path = path.parent / "manifest.json"
    if not manifest_path.is_file():
        return
    manifest = read_json(manifest_path)
    entries = [manifest, *(v for v in manifest.values() if isinstance(v, dict))]
    for entry in entries:
        if isinstance(entry.get("path"), str) and Path(entry["path"]).name == path.name and "sha256" in entry:
            digest = sha256_file(path)
            if digest != entry["sha256"]:
                raise InputError(
                    f"{path}: sha256 is {digest}, but {manifest_path} recorded {entry['sha256']} when it was "
                    f"written; the file was changed since. Delete {path.parent} and rerun to write it again")
            return


def parquet_file(path: str | os.PathLike):
    """A parquet file opened for reading (pyarrow.parquet.ParquetFile), or an InputError naming it."""
    import pyarrow.parquet as pq

    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: file not found")
    try:
        return pq.ParquetFile(path)
    except Exception as err:  # pyarrow raises several types for a bad file
        raise InputError(f"{path}: not a readable parquet file ({err})") from err
