"""The code a stage runs, found from its imports, and the hash of it that goes into its content keys.

A stage's code is its module (randopt.stages.<stage>: main() parses its command line, run() does the
work) and every project module it imports, transitively: imports at module level and inside functions
alike, read from the syntax tree, so adding an import keys the new module without anyone remembering
to. Nothing here is a list of files.

Three choices, and why:

* A module enters the hash under its import name (randopt.engines.perturb), not its file path: the
  name is what the code imports, so a checkout moved elsewhere, or a module that keeps its name, keys
  the same; and a file moved to another name is another module, keyed anew.

* Comments and blank lines are not part of the hash; everything else is (docstrings too: argparse
  and error messages read them). A comment fix then reruns nothing, while any change Python can see
  does. The hash is of the source text with comments cut out (found by tokenize), not of the syntax
  tree, because ast.dump's format changes between Python versions and a key must be the same on
  every machine that shares a results folder.
* Modules under randopt/runtime/ are followed but not hashed. They decide how and where a job runs
  (logging, progress bars, GPU claims, resident engines), never what it computes: a job's tables
  are the same with and without a resident engine (tests/test_resident.py), on any GPU slot. Editing
  them should not rerun hours of search. Their imports are followed, so what they reach (the
  engines that runtime/engine_args.py builds) is keyed. This module is followed but not hashed
  too (runtime/resident/identity.py imports it, which made every stage hash it): what it computes
  *is* the keys, so a change to how code is keyed shows in the keys themselves, and a refactor of
  it that keys the same code the same way reruns nothing.

docs/design.md, "Cache keys", says which key covers which stages.
"""
from __future__ import annotations

import ast
import atexit
import hashlib
import io
import json
import os
import sys
import tempfile
import tokenize
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path

from randopt.checkout import REPO, WORKFLOW

# The top-level names of this project's modules; any other import is a library's. Everything lives inside
# the package: a top-level `kernels` is Hugging Face's (which transformers imports), and a top-level folder
# of the checkout would shadow any installed package of its name (the kernels and the stage CLIs, once
# kernels/ and scripts/, moved in for that: tests/test_import_names.py).
PROJECT = ("randopt",)
# Followed, not hashed (see the module docstring).
NOT_KEYED = ("randopt.runtime", "randopt.code_keys")


def module_file(name: str, root: Path = REPO) -> Path | None:
    """The file of a project module or package under root, or None (a library, or no such module)."""
    if name.split(".")[0] not in PROJECT:
        return None
    base = root.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _package_of(name: str, path: Path) -> str:
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def imported_modules(name: str, path: Path, root: Path = REPO) -> set[str]:
    """The project modules one module imports, anywhere in its body (functions included)."""
    found: set[str] = set()
    for module, names in _import_statements(_package_of(name, path), path.read_text(encoding="utf-8"), str(path)):
        found.add(module)
        # `from package import submodule` imports the submodule
        found.update(f"{module}.{alias}" for alias in names if module_file(f"{module}.{alias}", root) is not None)
    return {m for m in _with_packages(found) if module_file(m, root) is not None}


# Parsing and tokenizing are most of a key's cost, and every root set (each key's stages) walks the
# same shared modules: a Snakemake start computed ~350 parses of ~60 files. Both caches below are
# keyed by the source text itself (and what else the result depends on), so an edited file is parsed
# anew and a key is exactly what it was without them; what depends on the tree on disk (which
# modules exist under a root) is looked up on every call.
#
# Every Snakemake start (a run, a dry run, `make status`) is a new process, though, and parsed the same files
# again: 0.6 s of a 3 s DAG build. So the two results are also kept on disk, in the checkout's .snakemake/,
# under the sha256 of the source text (and the Python version, whose tokenizer they come from): a file's
# entry is found only for the very text it was computed from, so the memo can be stale in no case, only
# missing (then it is computed again). Processes that write it at once lose entries, never add wrong ones.
class _SourceMemo:
    def __init__(self, path: Path):
        self.path, self.entries, self.used, self.loaded, self.changed = path, {}, {}, False, False

    def get(self, key: str, compute):
        if not self.loaded:
            self.loaded = True
            try:
                stored = json.loads(self.path.read_text(encoding="utf-8"))
                if stored.get("python") == list(sys.version_info[:2]):
                    self.entries = stored["entries"]
            except (OSError, ValueError, KeyError, AttributeError):
                pass   # absent or unreadable: computed again, and written anew
        if key not in self.entries:
            self.entries[key], self.changed = compute(), True
        self.used[key] = self.entries[key]
        return self.used[key]

    def save(self) -> None:
        """The entries this process used (so the file holds what the current code needs, not every edit ever)."""
        if not self.changed:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent)
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump({"python": list(sys.version_info[:2]), "entries": self.used}, out)
            os.replace(tmp, self.path)
        except OSError:
            pass   # a read-only checkout: nothing is kept, nothing is wrong


def _memo_path() -> Path:
    """A checkout keeps the memo in its own .snakemake/; an installed package (the workflow inside it) in the
    user's cache, not in site-packages."""
    if WORKFLOW == REPO:
        return REPO / ".snakemake" / "randopt-code-keys.json"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "randopt" / "code-keys.json"


_MEMO = _SourceMemo(_memo_path())
atexit.register(_MEMO.save)


def _text_key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@lru_cache(maxsize=4096)
def _import_statements(package: str, text: str, filename: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(module, names imported from it) of each import in a module's source (names only for `from`);
    package: the module's own package, which relative imports start from."""
    statements = _MEMO.get(f"imports:{package}:{_text_key(text)}",
                           lambda: _parse_imports(package, text, filename))
    return tuple((module, tuple(names)) for module, names in statements)


def _parse_imports(package: str, text: str, filename: str) -> list[tuple[str, tuple[str, ...]]]:
    tree = ast.parse(text, filename=filename)
    statements = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            statements.extend((alias.name, ()) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the module's package, level - 1 packages up
                parts = package.split(".")
                prefix = ".".join(parts[: len(parts) - node.level + 1])
                module = f"{prefix}.{node.module}" if node.module else prefix
            else:
                module = node.module
            statements.append((module, tuple(alias.name for alias in node.names)))
    return statements


def _with_packages(modules: Iterable[str]) -> set[str]:
    """The modules and the packages they lie in: importing a.b.c runs a/__init__.py and a/b/__init__.py."""
    names = set()
    for module in modules:
        parts = module.split(".")
        names.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return names


def closure(roots: Iterable[str], root: Path = REPO) -> dict[str, Path]:
    """Every project module the roots import, transitively, the roots included: name -> file."""
    todo, seen = sorted(_with_packages(roots)), {}
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        path = module_file(name, root)
        if path is None:
            raise ValueError(f"{name} is no module of this project under {root}")
        seen[name] = path
        todo.extend(imported_modules(name, path, root) - seen.keys())
    return seen


def keyed(name: str) -> bool:
    return not any(name == p or name.startswith(p + ".") for p in NOT_KEYED)


def keyed_source(path: Path) -> bytes:
    """A module's source as its key sees it: comments and blank lines removed, the rest verbatim."""
    return _without_comments(path.read_text(encoding="utf-8"))


@lru_cache(maxsize=4096)
def _without_comments(text: str) -> bytes:
    return _MEMO.get(f"keyed:{_text_key(text)}", lambda: _strip_comments(text).decode()).encode()


def _strip_comments(text: str) -> bytes:
    lines = text.splitlines()
    comments = [t for t in tokenize.generate_tokens(io.StringIO(text).readline) if t.type == tokenize.COMMENT]
    for token in reversed(comments):  # a comment runs to the end of its line
        (row, col), _ = token.start, token.end
        lines[row - 1] = lines[row - 1][:col]
    return "\n".join(line.rstrip() for line in lines if line.strip()).encode()


def keyed_modules(roots: Iterable[str], root: Path = REPO) -> dict[str, Path]:
    """The modules whose code goes into the key of what the roots compute: name -> file, by name."""
    return {name: path for name, path in sorted(closure(roots, root).items()) if keyed(name)}


@lru_cache(maxsize=None)
def _version(roots: tuple[str, ...], root: Path) -> str:
    h = hashlib.sha256()
    for name, path in keyed_modules(roots, root).items():
        h.update(name.encode() + b"\0" + keyed_source(path) + b"\0")
    return h.hexdigest()[:12]


def modules_version(*modules: str, root: Path = REPO) -> str:
    """sha256 (12 hex) of the code of the named modules and of everything they import."""
    return _version(tuple(sorted(set(modules))), Path(root).resolve())


def code_version(*stages: str, root: Path = REPO) -> str:
    """sha256 (12 hex) of the code the named stages run: randopt/stages/<stage>.py and what it imports."""
    return modules_version(*(f"randopt.stages.{s}" for s in stages), root=root)


def clear_cache() -> None:
    """Forget computed versions (for a process that edits code between two keys: the tests)."""
    _version.cache_clear()
