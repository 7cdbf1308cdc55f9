"""MATH (MATH-500 format: problem, answer, subject, level): the reward is math-verify's equivalence of
the completion's last \\boxed{} with the reference answer, so "\\frac12", "0.5" and "1/2" agree.

Problems come from a local JSONL in that format, or from the hub (HuggingFaceH4/MATH-500 by default)
at a pinned commit through the local HF cache, as GSM8K's hub source does (randopt/data/gsm8k.py).
MATH-500 is one pool of 500 test problems: the freezer draws disjoint train and test splits from it.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from randopt.data.boxed import last_boxed
from randopt.data.hub import hf_dataset_file
from randopt.tasks.base import Reward, Task, full, zero
from randopt.tasks.local_jsonl import load_rows

FIELDS = ("problem", "answer")
WHAT = 'MATH-500-format rows {"problem", "answer", "subject", "level"}'


def equivalent(answer: str, reference: str) -> bool:
    """math-verify's verdict on two LaTeX answers (each parsed as one math expression)."""
    from math_verify import parse, verify  # imported here: only MATH runs pay for sympy
    gold, predicted = parse(f"${reference}$"), parse(f"${answer}$")
    if not gold or not predicted:
        return answer.strip() == reference.strip()  # nothing math-verify can read: compare the text
    return bool(verify(gold, predicted))


class Math(Task):
    kind = "math"

    def load_pools(self, cache_dir=None) -> dict[str, list[dict]]:
        source = self.block["source"]
        if source == "jsonl":
            path = self.block["jsonl"]["path"]
        else:
            hub = self.block["hub"]
            path = hf_dataset_file(hub["repo"], hub["file"], hub["revision"], cache_dir)
        rows = load_rows(path, FIELDS, WHAT)
        return {"all": [{**row, "answer": str(row["answer"])} for row in rows]}

    def extract(self, completion: str) -> str | None:
        return last_boxed(completion)

    def reward(self, completion: str, problem: Mapping[str, Any]) -> Reward:
        answer = self.extract(completion)
        if answer is None:
            return zero("no \\boxed{} answer found")
        if equivalent(answer, str(problem["answer"])):
            return full()
        return zero(f"not equivalent: {answer!r}, reference {problem['answer']!r}")

    def vote_key(self, answer):
        return None if answer is None else "".join(answer.split())


TASK_CLASS = Math
