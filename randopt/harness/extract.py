"""The answer a member's completion gives, for the ensemble's vote in generate_until (docs/lm_eval.md).

- When the lm-eval task is the run's own task (its name starts with one of LM_EVAL_NAMES[kind]), the
  run's own extraction and vote key (randopt/tasks/): GSM8K's number after the last "####" (else in the
  last \\boxed{}, else the last number), compared as exact numbers, as the vote stage compares them.
- Any other task: the same number rule (randopt/data/gsm8k.py extract_answer), compared as exact
  numbers; a completion with no number votes with its last non-empty line, stripped; an empty
  completion abstains.
"""
from __future__ import annotations

from collections.abc import Callable, Hashable
from fractions import Fraction

from randopt.data.gsm8k import extract_answer

# lm-eval task names (prefixes) that are a randopt task kind: gsm8k, gsm8k_cot, ...; minerva_math_algebra, ...
LM_EVAL_NAMES = {"gsm8k": ("gsm8k",), "math": ("minerva_math", "hendrycks_math"), "countdown": ("countdown",)}

Extractor = Callable[[str], Hashable | None]


def normalized_answer(completion: str) -> Hashable | None:
    """The stated normalization for tasks other than the run's: a number, else the last line."""
    number = extract_answer(completion)
    if number is not None:
        return Fraction(number)
    lines = [line.strip() for line in completion.splitlines() if line.strip()]
    return lines[-1] if lines else None


def is_runs_task(lm_eval_task: str, run_task_kind: str) -> bool:
    return any(lm_eval_task.startswith(name) for name in LM_EVAL_NAMES.get(run_task_kind, ()))


def extractor_for(lm_eval_task: str, run_task) -> Extractor:
    """The vote key of a completion on lm_eval_task: the run's task's when it is that task."""
    if is_runs_task(lm_eval_task, run_task.kind):
        return lambda completion: run_task.vote_key(run_task.extract(completion))
    return normalized_answer
