"""GSM8K as a task: its extraction and scoring are randopt/data/gsm8k.py's (the first number after the
last "####", compared as exact decimals). Its problems come from the source task.gsm8k selects and are
frozen as every task's are (randopt/tasks/freeze.py); its prompt is task.gsm8k's system line, examples and stop."""
from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from randopt.data import gsm8k
from randopt.io import InputError
from randopt.schema import check_source
from randopt.tasks.base import Reward, Task, full, zero


class GSM8K(Task):
    kind = "gsm8k"

    @property
    def source(self) -> dict:
        """The selected source, {"kind": generated | jsonl | hub, **its block}, checked against the schema."""
        kind = self.block.get("source")
        if not isinstance(kind, str) or not isinstance(self.block.get(kind), Mapping):
            raise InputError('task gsm8k: no source; give {"kind": "gsm8k", "source": "jsonl", "jsonl": {"path": ...}} '
                             "(task.gsm8k's keys: config/schema.yaml)")
        return check_source("gsm8k", {"kind": kind, **self.block[kind]})

    @property
    def synthetic(self) -> bool:
        """Generated problems are the project's own, not GSM8K's (the record says so)."""
        return self.source["kind"] == "generated"

    def load_pools(self, cache_dir=None) -> dict[str, list[dict]]:
        return gsm8k.load_pools(self.source, cache_dir=cache_dir)

    def render(self, problem: Mapping[str, Any]) -> str:
        return problem["question"]

    def extract(self, completion: str) -> str | None:
        return gsm8k.extract_answer(completion)

    def reward(self, completion: str, problem: Mapping[str, Any]) -> Reward:
        if gsm8k.is_correct(completion, problem["answer"]):
            return full()
        answer = self.extract(completion)
        if answer is None:
            return zero("no number found")
        return zero(f"wrong: {answer}, reference {gsm8k.reference_answer(problem['answer'])}")

    def vote_key(self, answer):
        """As the vote stage compares GSM8K answers (randopt/ensemble/majority_vote.py): as exact numbers."""
        return None if answer is None else Fraction(answer)


TASK_CLASS = GSM8K
