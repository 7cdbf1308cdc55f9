"""What an engine serves, by its bytes: the files of the model dir it loads, hashed as they are now, and
checked against the manifest written beside that dir (<key>/model and <key>/manifest.json: prepare_model's,
or distill_train's for a fine-tuned arm).

Every engine checks before it loads (randopt/engines/factory.py, the resident server), and a resident
engine is reused only by a job whose model dir hashes to the same bytes (randopt/runtime/resident/
identity.py): never by a name, a size or an mtime. Weights edited in place, even with their old mtime
put back, then either fail the check (a prepared model whose manifest names other bytes) or start
an engine of their own (a model dir with no manifest, as in tests and tools).

Hashes go through the run's stat cache (randopt/inputs.py: size, mtime, ctime and inode, and ctime
cannot be set back), so a 15 GB model is read once, not by every job.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from randopt.inputs import CACHE_PATH, StatCache
from randopt.io import InputError, read_json

MANIFEST = "manifest.json"
# prepare.py's WEIGHT_PATTERNS as suffixes (tests/test_resident.py holds them equal): not imported, so that
# prepare_model's code stays out of the keys of the stages that only load engines
WEIGHT_SUFFIXES = (".safetensors", ".bin")


def _cache() -> StatCache:
    """The run directory's stat cache when this process runs in one (a stage), else this process's own."""
    return StatCache(CACHE_PATH if CACHE_PATH.parent.is_dir() else None)


def file_sha256s(model_dir: Path) -> dict[str, str]:
    """sha256 of each file directly in the model dir, by name."""
    files = sorted(p for p in model_dir.iterdir() if p.is_file())
    if not files:
        return {}
    cache = _cache()
    _, shas = cache.digest(files)
    try:
        cache.save()
    except OSError:  # only a shortcut: a read-only run directory reads again next time
        pass
    return dict(zip((p.name for p in files), shas))


def _is_weights(name: str) -> bool:
    return name.endswith(WEIGHT_SUFFIXES)


def check_manifest(model_dir: Path, shas: dict[str, str]) -> None:
    """The weight files now against the manifest beside the model dir, when there is one."""
    manifest_path = model_dir.parent / MANIFEST
    if not manifest_path.is_file():
        return
    written = read_json(manifest_path)
    # prepare_model's manifest names them weights_sha256, distill_train's (a fine-tuned arm) weights
    expected = written.get("weights_sha256", written.get("weights"))
    if not isinstance(expected, dict):
        return  # no manifest of a model's weights
    now = {name: sha for name, sha in shas.items() if _is_weights(name)}
    if now != expected:
        changed = sorted(n for n in set(now) | set(expected) if now.get(n) != expected.get(n))
        raise InputError(f"{model_dir}: the weights are not the bytes its manifest ({manifest_path}) names "
                         f"({', '.join(changed)} changed since prepare_model wrote it): the prepared model was "
                         f"edited in place. Delete {model_dir.parent} and run the workflow again to prepare it anew")


def served_sha256(model_dir: str | Path) -> str:
    """The identity of what an engine loading model_dir serves: the sha256 of its files' names and bytes,
    after checking its weights against the prepared model's manifest (InputError when they differ). A
    dir that is not there holds no files: the engine that loads it says what is missing."""
    model_dir = Path(model_dir)
    shas = file_sha256s(model_dir) if model_dir.is_dir() else {}
    check_manifest(model_dir, shas)
    return hashlib.sha256(json.dumps(sorted(shas.items())).encode()).hexdigest()
