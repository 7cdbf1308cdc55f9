"""Any task from a JSONL file of {question, answer} rows (optional id): bring data, write no code.

The match rule (task.jsonl.match):
  exact    the text after the last "####" (to the end of its line; without "####", the last non-empty
           line) equals the answer, whitespace collapsed (case_sensitive decides case);
  numeric  GSM8K's extraction (randopt/data/gsm8k.py: the first number after the last "####", else in
           the last \\boxed{}, else the last number) equals the answer's number as exact decimals, so
           "1,000" matches "1000.0";
  regex    the pattern's last match in the completion (its group 1 if it has groups) equals the answer
           as under exact.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from randopt.data.gsm8k import extract_answer as first_number_after_marker
from randopt.io import InputError
from randopt.tasks.base import Reward, Task, full, zero
from randopt.tasks.local_jsonl import load_pools


def _collapse(text: str, case_sensitive: bool) -> str:
    text = " ".join(text.split())
    return text if case_sensitive else text.casefold()


def _after_marker(completion: str) -> str | None:
    if "####" in completion:
        text = completion.rsplit("####", 1)[1].strip().split("\n", 1)[0]
    else:
        lines = [line for line in completion.splitlines() if line.strip()]
        text = lines[-1] if lines else ""
    return text.strip() or None


class JsonlTask(Task):
    kind = "jsonl"

    def __init__(self, block):
        super().__init__(block)
        self.match = self.block.get("match", "exact")
        self.case_sensitive = self.block.get("case_sensitive", True)
        self.pattern = re.compile(self.block["pattern"]) if self.match == "regex" else None

    def load_pools(self, cache_dir=None) -> dict[str, list[dict]]:
        pools = load_pools(self.block["path"], ("question", "answer"), 'one {"question", "answer"} object per line')
        if self.match == "numeric":
            for rows in pools.values():
                for row in rows:
                    if first_number_after_marker(str(row["answer"])) is None:
                        raise InputError(f"{self.block['path']}: answer {row['answer']!r} has no number, but match is "
                                         f"numeric; use match exact, or give numeric answers")
        return {split: [{**row, "answer": str(row["answer"])} for row in rows] for split, rows in pools.items()}

    def extract(self, completion: str) -> str | None:
        if not isinstance(completion, str):
            return None
        if self.match == "numeric":
            return first_number_after_marker(completion)
        if self.match == "regex":
            matches = list(self.pattern.finditer(completion))
            if not matches:
                return None
            last = matches[-1]
            return (last.group(1) if self.pattern.groups else last.group(0)).strip() or None
        return _after_marker(completion)

    def vote_key(self, answer):
        if answer is None or self.match == "numeric":
            return answer
        return _collapse(answer, self.case_sensitive)

    def reward(self, completion: str, problem: Mapping[str, Any]) -> Reward:
        answer = self.extract(completion)
        if answer is None:
            return zero({"numeric": "no number found", "regex": "the pattern does not match"}.get(self.match, "no answer found"))
        if self.match == "numeric":
            right = Decimal(answer) == Decimal(first_number_after_marker(str(problem["answer"])))
        else:
            right = self.vote_key(answer) == _collapse(str(problem["answer"]), self.case_sensitive)
        return full() if right else zero(f"wrong: {answer!r}, reference {problem['answer']!r}")


TASK_CLASS = JsonlTask
