"""GSM8K's own data: answer extraction, numeric scoring, and strict loading of its sources.

Extraction is robust where upstream is not ("1,000", "$18.00", "18.", "-3", "#### 7."): the
final answer is the first number after the last "####"; with no "####", the first number in the
last \\boxed{} (a real instruct model boxes its answer more often than it writes "####", then often
goes on: "\\boxed{5}. Javier needs 5 hits in the remaining 10 games"); with neither, the last number
in the text. Answers are compared as exact decimals, so "18.00" equals "18".

A source gives a train and a test pool of {"question", "answer"} rows, in source order: generated
problems (randopt/data/synth.py), a directory of train.jsonl and test.jsonl, or the Hub's parquet at
a pinned commit. GSM8K's task (randopt/tasks/gsm8k.py) hands them to the freezer every task shares
(randopt/tasks/freeze.py, randopt/data/splits.py).
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from randopt.data.boxed import last_boxed
from randopt.data.hub import hf_dataset_file
from randopt.inputs import Input
from randopt.schema import check_source
from randopt.io import InputError, numbered_jsonl, parquet_file

# GSM8K's two pools, a file each in a source; the frozen splits of the same names are drawn from them
# (randopt/data/splits.py, which this module does not import: editing the split writer reruns no scoring).
POOLS = ("train", "test")

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


def _plain(boxed: str) -> str:
    """A box's LaTeX as the number rule reads text: thousands written "2{,}000" or "1\\,000" joined, an escaped
    dollar a dollar, and of an equation ("5 + 7 = 12") the side after its last "="."""
    for latex, plain in (("{,}", ","), ("\\,", ""), ("\\!", ""), ("\\$", "$")):
        boxed = boxed.replace(latex, plain)
    return boxed.rsplit("=", 1)[-1]


def extract_answer(text: str) -> str | None:
    """The final numeric answer of ``text`` as a normalised string ("1000", "18", "-3", "1234.5").

    The first number after the last "####"; without "####", the first number in the last \\boxed{}
    (one that holds a number); without either, the last number in the text. None when there is no
    number there. (On the real Qwen2.5-Coder-1.5B's answers under FlashOpt's prompt, 94 % boxed
    their answer and 2 % wrote "####"; where the box and the last number differed, the box was right
    86 times and the last number once: bench/real_model/README.md.)
    """
    if not isinstance(text, str):
        return None
    if "####" in text:
        match = _NUMBER_RE.search(text.rsplit("####", 1)[1])
        return _normalise(match) if match else None
    boxed = last_boxed(text)
    match = _NUMBER_RE.search(_plain(boxed)) if boxed else None
    if match is None:
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
# Sources
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
        return {split: load_jsonl(root / f"{split}.jsonl") for split in POOLS}
    repo, config = source["repo"], source["config"]
    return {
        split: load_parquet(hf_dataset_file(repo, f"{config}/{split}-00000-of-00001.parquet",
                                            source["revision"], cache_dir))
        for split in POOLS
    }


def source_input(source: Mapping) -> Input | None:
    """A source's local files (randopt/inputs.py): a jsonl dir's train.jsonl and test.jsonl. Generated
    problems have none (their generator's code is keyed), nor a hub source (its pinned revision addresses it)."""
    if source["kind"] != "jsonl":
        return None
    root = Path(source["path"])
    return Input("task.gsm8k.jsonl.path", {f"{split}.jsonl": root / f"{split}.jsonl" for split in POOLS})
