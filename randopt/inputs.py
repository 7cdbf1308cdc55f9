"""A run's external inputs by their bytes: the files it reads from outside its own outputs (a local model
dir, a GGUF file or its parts, a task's or the held-out text's local files), each hashed when the DAG is
built, so that the sha256 enters the key of the stage that reads them (randopt/keys.py). An input edited
in place then moves its key, and the stage and everything after it run again at a new path; nothing
keyed by the old bytes is ever read for the new ones.

Reading a 15 GB model dir at every `snakemake -n` would cost minutes, so a file's sha256 is cached by its
stat (StatCache: size, mtime_ns, ctime_ns, inode; docs/design.md, "Cache keys", says what that trusts).
The stage that reads an input hashes what it read again, uncached, and refuses bytes other than the ones
it was keyed by (check_unchanged): the file changed after the DAG was built.

Sources with no external bytes have no fingerprint: generated problems and held-out text (their
generator's code is keyed), a shape model (randopt/keys.py keys its config), and hub sources pinned to a
40-hex revision, which the revision already addresses (hashing the HF cache would key a run one way
before the download and another after it).
"""
from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from randopt.io import InputError, write_json_atomic

# The cache beside Snakemake's own metadata in the run's directory: `make clean-results` (or deleting the
# file) forces every input to be read again.
CACHE_PATH = Path(".snakemake") / "input_fingerprints.json"
CHUNK = 1 << 22


@dataclass(frozen=True)
class Digest:
    """An input's sha256 (a file's bytes, parts joined in order, or a tree of named files) and each of its
    files' sha256 by name, in order."""
    sha256: str
    files: dict[str, str]


def file_identity(path: Path) -> list[int]:
    """What the cache trusts a file's bytes by. ctime cannot be set from user space, so an edit that puts
    back the old mtime (touch -d, rsync -t) still moves it; st_dev is left out because a network filesystem
    gives each client its own, and a cluster job must find the submitting host's entries."""
    st = path.stat()  # follows symlinks: a HF cache snapshot's files are links to its blobs
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


class StatCache:
    """sha256s of file sequences, keyed by their resolved paths and valid while every file's identity is
    unchanged. Saved atomically; an unreadable cache file is an empty cache (it is only ever a shortcut).
    With no path, the entries are the process's own (a tool or test that computes keys many times hashes
    each file once). `reads` counts the files read since it was opened."""

    _process_entries: dict[str, dict] = {}

    def __init__(self, path: str | os.PathLike | None = None):
        self.path = Path(path) if path is not None else None
        self.entries: dict[str, dict] = {} if self.path is not None else StatCache._process_entries
        self.changed = False
        self.reads = 0
        if self.path is not None and self.path.is_file():
            try:
                loaded = json.loads(self.path.read_text(encoding="utf-8"))
                self.entries = loaded if isinstance(loaded, dict) else {}
            except (OSError, json.JSONDecodeError):
                self.entries = {}

    def digest(self, paths: Sequence[Path]) -> tuple[str, list[str]]:
        """(sha256 of the files' bytes joined in order, each file's sha256): from the cache when no file's
        identity changed, else read once, every file's hash and the joined one in the same pass."""
        resolved = [Path(p).resolve() for p in paths]
        key = json.dumps([str(p) for p in resolved])
        identity = [file_identity(p) for p in resolved]
        hit = self.entries.get(key)
        if hit and hit.get("identity") == identity:
            return hit["sha256"], hit["files"]
        joined, files = stream_sha256(resolved)
        self.reads += len(resolved)
        # the identity taken before the read: a file edited while it was read is read again next time
        self.entries[key] = {"identity": identity, "sha256": joined, "files": files}
        self.changed = True
        return joined, files

    def save(self) -> None:
        if self.path is not None and self.changed:
            write_json_atomic(self.path, self.entries)
            self.changed = False


def stream_sha256(paths: Sequence[Path]) -> tuple[str, list[str]]:
    """sha256 of the files' bytes joined in order and of each file, in one read of each."""
    joined, files = hashlib.sha256(), []
    for path in paths:
        own = hashlib.sha256()
        with open(path, "rb") as fh:
            while block := fh.read(CHUNK):
                own.update(block)
                joined.update(block)
        files.append(own.hexdigest())
    return joined.hexdigest(), files


def tree_sha256(named: Mapping[str, str]) -> str:
    """One sha256 over named files' sha256s (a model dir, a pair of split files), in name order."""
    return hashlib.sha256("".join(f"{name}\0{sha}\n" for name, sha in sorted(named.items())).encode()).hexdigest()


# --- an input and its digest -------------------------------------------------------------------------

@dataclass(frozen=True)
class Input:
    """An external input: the config key that names it, its files by name, and whether they are one
    stream (a file, or a GGUF's parts joined in order: the digest is the joined bytes' sha256, so a single
    file's is its own) or a tree of separate files (a model dir, a pair of splits)."""
    key: str
    files: dict[str, Path]
    joined: bool = False

    def digest(self, cache: StatCache | None = None) -> Digest:
        """Through the cache, or (None) every byte read now."""
        read = cache.digest if cache is not None else (lambda paths: stream_sha256([Path(p) for p in paths]))
        names, paths = list(self.files), list(self.files.values())
        if self.joined:
            sha, parts = read(paths)
            return Digest(sha, dict(zip(names, parts)))
        each = {name: read([path])[0] for name, path in self.files.items()}
        return Digest(tree_sha256(each), each)


def file_input(key: str, path: str | os.PathLike) -> Input:
    """One file as an input: its digest is the file's sha256."""
    path = Path(path)
    return Input(key, {path.name: path}, joined=True)


def dir_files(root: Path) -> dict[str, Path]:
    """Every file below a dir by its relative path (links followed), hidden ones left out (.git, .cache:
    a download's bookkeeping, not the model)."""
    files = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in filenames:
            if not name.startswith("."):
                path = Path(dirpath) / name
                files[path.relative_to(root).as_posix()] = path
    return files


def fingerprints(inputs: Mapping[str, Input], cache_path: str | os.PathLike | None = None) -> dict[str, Digest]:
    """Each input's digest by its name, the cache at cache_path read and updated. A file that cannot be
    read is an InputError naming the input's config key."""
    cache = StatCache(cache_path)
    digests = {}
    for name, item in inputs.items():
        try:
            digests[name] = item.digest(cache)
        except OSError as err:
            raise InputError(f"config key '{item.key}': cannot read {err.filename} ({err.strerror}); "
                             f"give a readable file") from None
    cache.save()
    return digests


def check_unchanged(item: Input | None, expected: str | None) -> Digest | None:
    """At job time: hash the input again, uncached, after the stage read it. Bytes other than the ones its
    key was made from (the file changed after the DAG was built) are an error; a stage run by hand with no
    expected sha256 records what it read. Returns the digest for the stage's manifest."""
    if item is None:
        if expected:
            raise InputError(f"--source-sha256 {expected} was given, but this source has no local files to hash")
        return None
    digest = item.digest()
    if expected and digest.sha256 != expected:
        raise InputError(f"{item.key}: the input's sha256 is {digest.sha256} now, but {expected} when the workflow "
                         f"built its DAG and keyed this stage by it: a file changed during the run "
                         f"({', '.join(map(str, item.files.values()))}). Run the workflow again: it keys the new bytes")
    return digest
