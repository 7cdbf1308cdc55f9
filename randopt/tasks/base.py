"""The task interface every task implements (docs/tasks.md).

A frozen split's rows carry what the reward needs besides the completion: {"id", "question" (the
rendered user turn), "answer" (the reference, as text), ...the task's own fields}. So the engine
stages need nothing but the split and its manifest, which names the task (randopt/tasks/registry.py).
"""
from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any, NamedTuple

from randopt.io import InputError


class Reward(NamedTuple):
    """A completion's reward: value in [0, 1]; reason says why when it is 0 (no answer found, wrong,
    timed out, ...), and is None at full reward."""
    value: float
    reason: str | None = None


def full() -> Reward:
    return Reward(1.0, None)


def zero(reason: str) -> Reward:
    return Reward(0.0, reason)


class Task:
    """One task with its config block's parameters. Subclasses set `kind` and implement load_pools,
    extract and reward; score_all and vote_key have defaults that fit most tasks."""

    kind = "task"
    synthetic = False  # problems the project generates (the record says so)

    def __init__(self, block: Mapping[str, Any]):
        self.block = dict(block)

    # ---- problems --------------------------------------------------------------------------------
    def load_pools(self, cache_dir=None) -> dict[str, list[dict]]:
        """The problem pools, {"train": [...], "test": [...]} or {"all": [...]} (then the freezer takes
        disjoint train and test splits from the one pool). Each problem a dict with "answer" (the
        reference as text) and the fields the template names; an "id" is optional."""
        raise NotImplementedError

    def render(self, problem: Mapping[str, Any]) -> str:
        """The user turn of one problem: the block's template filled with the problem's fields."""
        try:
            return self.block["template"].format(**self.template_fields(problem))
        except KeyError as err:
            raise InputError(f"task {self.kind}: template {self.block['template']!r} names the field {err}, "
                             f"which the problems do not have; use one of {sorted(problem)}") from None

    def template_fields(self, problem: Mapping[str, Any]) -> dict:
        return dict(problem)

    def prompt(self) -> dict:
        """The decode keys this task's prompt sets: system line, worked examples, stop strings."""
        return {key: self.block[key] for key in ("system", "examples", "stop")}

    # ---- answers and rewards ---------------------------------------------------------------------
    def extract(self, completion: str) -> str | None:
        raise NotImplementedError

    def reward(self, completion: str, problem: Mapping[str, Any]) -> Reward:
        raise NotImplementedError

    def score_all(self, completions: Sequence[str], problems: Sequence[Mapping[str, Any]]) -> list[Reward]:
        """Rewards of many completions (a task whose reward is slow, code, runs them in parallel)."""
        return [self.reward(c, p) for c, p in zip(completions, problems)]

    def vote_key(self, answer: str | None) -> Hashable | None:
        """What members' answers are pooled by in the majority vote (None abstains): the answer itself
        unless two spellings of one answer should count as one vote."""
        return answer
