"""GSM8K: answer extraction, numeric scoring, strict loading and frozen train/test splits.

Extraction is robust where upstream is not ("1,000", "$18.00", "18.", "-3", "#### 7."): the
final answer is the first number after the last "####" (or, with no "####", the last number in
the text), and answers are compared as exact decimals, so "18.00" equals "18".

A frozen split is JSONL with one canonical row form {"id": "<split>-<index in source split>",
"question", "answer"}, written with ``canonical_json``: the same problems read from the Hub's
parquet or from a JSONL copy give byte-identical files. Selection is the first n of a seeded
permutation of the pool, so a larger n extends a smaller one.
"""
from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import numpy as np

from randopt.inputs import Input, check_unchanged
from randopt.schema import check_source
from randopt.io import InputError, atomic_path, canonical_json, numbered_jsonl, parquet_file, sha256_bytes

SPLITS = ("train", "test")
_COMMIT_RE = re.compile(r"[0-9a-f]{40}")

# A number: an optional sign (before a "$", or after it), digits (commas between digits are
# thousands separators and dropped), an optional decimal part; or a bare ".5". A "-" glued to a
# preceding word or digit ("2020-2021", "5-3") is not a sign.
_NUMBER_RE = re.compile(
    r"(?:(?<![\w.])(?P<sign1>[-\u2212])\s?)?"
    r"(?:\$\s?(?P<sign2>[-\u2212])?)?"
    r"(?:(?P<int>\d+(?:,\d+)*)(?P<frac>\.\d+)?|(?<![\d.])(?P<frac0>\.\d+))"
)


# ---------------------------------------------------------------------------------------------
# Extraction and scoring
# ---------------------------------------------------------------------------------------------

def _normalise(match: re.Match) -> str:
    negative = bool(match.group("sign1") or match.group("sign2"))
    if match.group("frac0"):
        digits = "0" + match.group("frac0")
    else:
        digits = match.group("int").replace(",", "") + (match.group("frac") or "")
    value = Decimal(digits)
    if negative:
        value = -value
    if value == value.to_integral_value():
        return str(int(value))  # also turns -0 into 0
    return format(value.normalize(), "f")


def extract_answer(text: str) -> str | None:
    """The final numeric answer of ``text`` as a normalised string ("1000", "18", "-3", "1234.5").

    The first number after the last "####"; without "####", the last number in the text.
    None when there is no number there.
    """
    if not isinstance(text, str):
        return None
    if "####" in text:
        match = _NUMBER_RE.search(text.rsplit("####", 1)[1])
    else:
        match = None
        for match in _NUMBER_RE.finditer(text):
            pass
    return _normalise(match) if match else None


def reference_answer(answer: str) -> str:
    """The normalised number of a GSM8K reference (a worked answer ending in "#### N", or a bare
    number). Raises InputError when there is none: a reference must always have an answer."""
    value = extract_answer(answer)
    if value is None:
        raise InputError(f"reference answer {answer[-60:]!r} has no number; references must end in '#### N' or be a number")
    return value


def is_correct(completion: str, reference: str) -> bool:
    """Whether the completion's extracted answer equals the reference's, compared as exact decimals."""
    predicted = extract_answer(completion)
    if predicted is None:
        return False
    try:
        return Decimal(predicted) == Decimal(reference_answer(reference))
    except InvalidOperation:  # pragma: no cover - extract_answer only returns valid decimals
        return False


# ---------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------

def _check_problem(question: Any, answer: Any, where: str) -> tuple[str, str]:
    if not isinstance(question, str) or not question.strip():
        raise InputError(f"{where}: 'question' must be a non-empty string; fix or remove that row")
    if not isinstance(answer, str) or not answer.strip():
        raise InputError(f"{where}: 'answer' must be a non-empty string; fix or remove that row")
    if "####" not in answer:
        raise InputError(f"{where}: answer has no '####' final-answer marker; GSM8K answers end in '#### N'")
    if extract_answer(answer) is None:
        raise InputError(f"{where}: no number after '####' in the answer; GSM8K answers end in '#### N'")
    return question, answer


def load_jsonl(path: str | Path) -> list[dict]:
    """Read a GSM8K-format JSONL file ({"question", "answer"} per line), strictly.

    Returns [{"question", "answer"}] in file order. Errors name the file and line.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: file not found; give a directory holding train.jsonl and test.jsonl")
    rows = []
    for lineno, row in numbered_jsonl(path, required=("question", "answer")):
        q, a = _check_problem(row["question"], row["answer"], f"{path}:{lineno}")
        rows.append({"question": q, "answer": a})
    if not rows:
        raise InputError(f"{path}: no problems in the file; it must hold one {{\"question\", \"answer\"}} object per line")
    return rows


def hf_dataset_file(repo: str, filename: str, revision: str, cache_dir: str | Path | None = None) -> Path:
    """Path of one file of a Hub dataset at a pinned commit, via ``hf_hub_download``.

    With the file already in the local HF cache at that commit, no network is used (and with
    HF_HUB_OFFLINE=1 none is tried). Hub errors become an InputError naming repo, file and commit.
    """
    if not isinstance(revision, str) or not _COMMIT_RE.fullmatch(revision):
        raise InputError(
            f"hub source {repo}: revision {revision!r} is not a pinned commit; give the 40-hex commit sha "
            "(a branch name would change under you)"
        )
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError, HfHubHTTPError, HFValidationError

    try:
        return Path(hf_hub_download(repo_id=repo, filename=filename, revision=revision,
                                    repo_type="dataset", cache_dir=cache_dir))
    except (EntryNotFoundError, HfHubHTTPError, HFValidationError, OSError) as err:
        raise InputError(
            f"hub dataset {repo}@{revision}: cannot get {filename} ({type(err).__name__}: {err}); "
            "check repo, revision and file name, or put the file in the local HF cache "
            "(HF_HUB_CACHE) / allow network (unset HF_HUB_OFFLINE)"
        ) from err


def load_parquet(path: str | Path) -> list[dict]:
    """Read a GSM8K-format parquet file (columns question, answer), strictly."""
    path = Path(path)
    table = parquet_file(path).read()
    missing = [c for c in ("question", "answer") if c not in table.column_names]
    if missing:
        raise InputError(f"{path}: missing column(s) {missing}; GSM8K parquet needs 'question' and 'answer'")
    rows = []
    for i, (q, a) in enumerate(zip(table.column("question").to_pylist(), table.column("answer").to_pylist())):
        q, a = _check_problem(q, a, f"{path} row {i}")
        rows.append({"question": q, "answer": a})
    if not rows:
        raise InputError(f"{path}: no problems in the file")
    return rows


# ---------------------------------------------------------------------------------------------
# Sources and freezing
# ---------------------------------------------------------------------------------------------

def load_pools(source: Mapping, *, cache_dir: str | Path | None = None) -> dict[str, list[dict]]:
    """The full train and test pools of a source, each [{"question", "answer"}] in source order."""
    source = check_source("gsm8k", dict(source))  # the schema's definition of the kind (config/schema.yaml)
    kind = source["kind"]
    if kind == "generated":
        from randopt.data import synth

        difficulty = synth.resolve_difficulty(source["difficulty"])
        # One stream, split in two: train and test never share a question.
        problems = synth.generate_problems(source["n_train_pool"] + source["n_test_pool"], source["seed"],
                                           difficulty=difficulty)
        return {"train": problems[:source["n_train_pool"]], "test": problems[source["n_train_pool"]:]}
    if kind == "jsonl":
        root = Path(source["path"])
        if not root.is_dir():
            raise InputError(f"GSM8K source path {root}: not a directory; give the directory holding train.jsonl and test.jsonl")
        return {split: load_jsonl(root / f"{split}.jsonl") for split in SPLITS}
    repo, config = source["repo"], source["config"]
    return {
        split: load_parquet(hf_dataset_file(repo, f"{config}/{split}-00000-of-00001.parquet",
                                            source["revision"], cache_dir))
        for split in SPLITS
    }


def source_input(source: Mapping) -> Input | None:
    """A source's local files (randopt/inputs.py): a jsonl dir's train.jsonl and test.jsonl. Generated
    problems have none (their generator's code is keyed), nor a hub source (its pinned revision addresses it)."""
    if source["kind"] != "jsonl":
        return None
    root = Path(source["path"])
    return Input("gsm8k.jsonl.path", {f"{split}.jsonl": root / f"{split}.jsonl" for split in SPLITS})


def check_sha256(value: str | None, what: str) -> None:
    """None, or 64 hex digits; anything else is an InputError naming ``what``."""
    if value is not None and (not isinstance(value, str) or not re.fullmatch(r"[0-9a-fA-F]{64}", value)):
        raise InputError(f"{what} {value!r} is not a sha256 (64 hex digits)")


def select_indices(pool_size: int, n: int, selection_seed: int) -> list[int]:
    """The first n of numpy ``default_rng(selection_seed).permutation(pool_size)``: stable as n grows."""
    return [int(i) for i in np.random.default_rng(selection_seed).permutation(pool_size)[:n]]


def freeze_splits(source: Mapping, n_train: int, n_test: int, selection_seed: int, *,
                  cache_dir: str | Path | None = None) -> tuple[list[dict], list[dict], dict]:
    """Select n_train / n_test problems from the source's pools.

    Returns (train_rows, test_rows, info); rows are {"id": "<split>-<index>", "question", "answer"}
    in selection order; info holds {"pool_sizes", "synthetic", "selection_seed"}.
    """
    if isinstance(selection_seed, bool) or not isinstance(selection_seed, int) or selection_seed < 0:
        raise InputError(f"selection seed must be a non-negative integer, got {selection_seed!r}")
    for split, n in (("train", n_train), ("test", n_test)):
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise InputError(f"n_{split} must be an integer >= 1 (an empty {split} split is useless), got {n!r}")
    pools = load_pools(source, cache_dir=cache_dir)
    out = {}
    for split, n in (("train", n_train), ("test", n_test)):
        pool = pools[split]
        if n > len(pool):
            raise InputError(
                f"n_{split}={n} is larger than the {split} pool ({len(pool)} problems); "
                f"lower n_{split} to at most {len(pool)} or use a larger source"
            )
        out[split] = [{"id": f"{split}-{i}", "question": pool[i]["question"], "answer": pool[i]["answer"]}
                      for i in select_indices(len(pool), n, selection_seed)]
    info = {
        "pool_sizes": {split: len(pools[split]) for split in SPLITS},
        "synthetic": source["kind"] == "generated",
        "selection_seed": selection_seed,
    }
    return out["train"], out["test"], info


def rows_to_jsonl(rows: list[dict]) -> bytes:
    """The canonical bytes of a frozen split."""
    return "".join(canonical_json(r) + "\n" for r in rows).encode("utf-8")


def write_frozen(source: Mapping, n_train: int, n_test: int, selection_seed: int, *,
                 out_train: str | Path, out_test: str | Path, manifest: str | Path,
                 pinned_train_sha256: str | None = None, pinned_test_sha256: str | None = None,
                 cache_dir: str | Path | None = None, source_sha256: str | None = None) -> dict:
    """Freeze both splits and write them and the manifest, all or nothing.

    Everything is written to temporary siblings and checked (pinned sha256s) before any rename,
    so on error no output is created or overwritten. The source's local files are hashed after they
    were read, and bytes other than source_sha256 (the DAG build's, which keys this stage) are refused;
    the manifest's source_sha256 is what was read. Returns the manifest.
    """
    check_sha256(pinned_train_sha256, "pinned train sha256")
    check_sha256(pinned_test_sha256, "pinned test sha256")
    paths = {"train": Path(out_train), "test": Path(out_test)}
    resolved = [p.resolve() for p in (paths["train"], paths["test"], Path(manifest))]
    if len(set(resolved)) != 3:
        raise InputError(f"train, test and manifest outputs must be three different paths, got {[str(p) for p in resolved]}")
    train, test, info = freeze_splits(source, n_train, n_test, selection_seed, cache_dir=cache_dir)
    read = check_unchanged(source_input(check_source("gsm8k", dict(source))), source_sha256)
    info |= {"source_sha256": read.sha256} if read else {}
    return write_splits({"train": train, "test": test}, {"source": dict(source), **info}, paths, manifest,
                        {"train": pinned_train_sha256, "test": pinned_test_sha256})


def write_splits(rows: Mapping[str, list[dict]], info: Mapping, paths: Mapping[str, Path], manifest: str | Path,
                 pinned: Mapping[str, str | None]) -> dict:
    """Write frozen splits (split -> rows) as canonical JSONL at paths[split] and their manifest (each
    split's sha256, size and path, then info), all or nothing: each pinned sha256 is checked before
    any file is written. GSM8K's freezer and every other task's (randopt/tasks/freeze.py) write this
    way. Returns the manifest."""
    data = {split: rows_to_jsonl(rows[split]) for split in SPLITS}
    record: dict[str, Any] = {}
    for split in SPLITS:
        digest = sha256_bytes(data[split])
        if pinned[split] is not None and pinned[split].lower() != digest:
            raise InputError(
                f"{paths[split]}: sha256 of the frozen {split} split is {digest}, but the config pins "
                f"{pinned[split].lower()}; the source or selection changed (nothing was written): "
                "fix the source, or update the pinned sha256 if the change is intended"
            )
        record[split] = {"sha256": digest, "n": len(rows[split]), "path": str(paths[split])}
    record.update(info)
    text = json.dumps(record, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    with contextlib.ExitStack() as stack:
        tmp_train = stack.enter_context(atomic_path(paths["train"]))
        tmp_test = stack.enter_context(atomic_path(paths["test"]))
        tmp_manifest = stack.enter_context(atomic_path(manifest))
        tmp_train.write_bytes(data["train"])
        tmp_test.write_bytes(data["test"])
        tmp_manifest.write_text(text, encoding="utf-8")
    return record
