"""Scoring a model (base or perturbed) on a task's problems: prompts in, per-problem rows out.

One function does the work for train shards, test members and the base model, so every number in
the record comes from the same prompt, decode and extraction.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import pandas as pd

from randopt.scoring import answer_cache
from randopt.scoring.answer_blocks import group_by_block
from randopt.schema import check_decode
from randopt.engines.base import Engine
from randopt.engines.switch import switch_weights
from randopt.tasks.base import Task
from randopt.tasks.gsm8k import GSM8K


@dataclass(frozen=True)
class DecodeSpec:
    max_tokens: int
    stop: tuple[str, ...]
    system: str | None
    examples: tuple[tuple[str, str], ...]

    @classmethod
    def from_config(cls, decode: dict) -> "DecodeSpec":
        """From the config's decode block or a --decode-file argument, checked against the schema's
        definitions.decode (defaults filled): a bad key is an error naming it before any engine loads."""
        decode = check_decode(decode)
        return cls(max_tokens=int(decode["max_tokens"]), stop=tuple(decode["stop"]), system=decode.get("system"),
                   examples=tuple(tuple(e) for e in decode.get("examples", ())))


def build_prompts(engine: Engine, problems: list[dict], spec: DecodeSpec) -> list[str]:
    return [engine.chat_prompt(p["question"], spec.system, list(spec.examples)) for p in problems]


def score_completions(problems: list[dict], completions, task: Task | None = None) -> list[dict]:
    """One row per problem: the task's extracted answer and whether its reward is full (every task's
    reward is 0 or 1 so far; a partial reward counts as wrong here). task None: GSM8K."""
    task = task or GSM8K({})
    rewards = task.score_all([c.text for c in completions], problems)
    return [{"problem_id": p["id"], "answer": task.extract(c.text), "correct": bool(r.value >= 1.0),
             "n_tokens": c.n_tokens, "finish": c.finish, "completion": c.text}
            for p, c, r in zip(problems, completions, rewards)]


def evaluate_weights(engine: Engine, prompts: list[str], problems: list[dict], spec: DecodeSpec,
                     seed: int, sigma: float, batches: list[list[int]] | None = None,
                     task: Task | None = None) -> pd.DataFrame:
    """Set the weights to (seed, sigma), or base for seed == BASE, and score every problem.

    batches: positions in prompts, one generate call each (the answer blocks of
    randopt/scoring/answer_blocks.py), in the order the rows come out; None: one call for all prompts."""
    t0 = time.perf_counter()
    switch_weights(engine, seed, sigma)
    t1 = time.perf_counter()
    batches = batches if batches is not None else [list(range(len(prompts)))]
    completions, order = [], [i for batch in batches for i in batch]
    for batch in batches:
        completions += engine.generate([prompts[i] for i in batch], spec.max_tokens, list(spec.stop))
    t2 = time.perf_counter()
    return member_rows([problems[i] for i in order], completions, seed, sigma, t1 - t0, t2 - t1, task)


def evaluate_members_together(engine: Engine, prompts: list[str], problems: list[dict], spec: DecodeSpec,
                              members: list[tuple[int, float]], batches: list[list[int]] | None = None,
                              task: Task | None = None) -> list[pd.DataFrame]:
    """evaluate_weights for several members decoded together (Engine.generate_members), one frame per
    member, in order; each batch is one generate_members call, as it is one generate call there."""
    t0 = time.perf_counter()
    engine.generate_members(members, [], spec.max_tokens, list(spec.stop))   # no prompts: stacks the members
    t1 = time.perf_counter()
    batches = batches if batches is not None else [list(range(len(prompts)))]
    completions, order = [[] for _ in members], [i for batch in batches for i in batch]
    for batch in batches:
        for mine, new in zip(completions, engine.generate_members(members, [prompts[i] for i in batch],
                                                                  spec.max_tokens, list(spec.stop))):
            mine += new
    t2 = time.perf_counter()
    # The members' switch (the stacking) and generation are one piece of work, so each member's switch_s
    # and generate_s are its share of them, 1/M each: a table's sums stay the seconds spent.
    share = 1 / len(members)
    return [member_rows([problems[i] for i in order], done, seed, sigma, (t1 - t0) * share, (t2 - t1) * share, task)
            for (seed, sigma), done in zip(members, completions)]


def member_rows(problems: list[dict], completions, seed: int, sigma: float, switch_s: float, generate_s: float,
                task: Task | None = None) -> pd.DataFrame:
    """One member's scored rows (score_completions), with its member and the seconds of its switch and
    its generation."""
    rows = pd.DataFrame(score_completions(problems, completions, task))
    rows.insert(0, "sigma", float(sigma))
    rows.insert(0, "seed", int(seed))
    rows["switch_s"] = switch_s
    rows["generate_s"] = generate_s
    return rows


class Scorer:
    """Scores members on chosen train problems through the answer cache (randopt/scoring/answer_cache.py).

    A member's answers already cached are read back; only the missing (member, problem) pairs are
    generated, and each member's new answers are cached as soon as it is done. The engine (and the
    prompts, which need its tokenizer) start on the first member that lacks an answer, so a job whose
    members are all cached starts no engine.

    answer_blocks (randopt/scoring/answer_blocks.py): missing problems are generated block by block, each
    block's in one engine call, so a problem's answer comes from the same batch in every mode."""

    def __init__(self, make_engine, problems: list[dict], spec: DecodeSpec, cache_dir: str, answer_blocks,
                 task: Task | None = None):
        self._make_engine, self.problems, self.spec, self.cache_dir = make_engine, problems, spec, cache_dir
        self.task = task
        self.answer_blocks = answer_blocks
        self.engine: Engine | None = None
        self.prompts: list[str] | None = None
        self.load_s = 0.0
        self.slots_evaluated = 0          # (member, problem) pairs generated by this job
        self.members_evaluated: list[tuple[int, float]] = []

    def _ensure_engine(self) -> Engine:
        if self.engine is None:
            start = time.perf_counter()
            self.engine = self._make_engine()
            self.prompts = build_prompts(self.engine, self.problems, self.spec)
            self.load_s = time.perf_counter() - start
        return self.engine

    def answers(self, seed: int, sigma: float, indices) -> pd.DataFrame:
        """Member (seed, sigma)'s rows for the problems at `indices` (rows of the frozen split), in
        problem order, generating those not cached yet."""
        cached = answer_cache.load(self.cache_dir, seed, sigma)
        todo = answer_cache.missing_problems(cached, indices)
        if todo:
            engine = self._ensure_engine()
            todo, batches = self._blocks(todo)
            rows = evaluate_weights(engine, [self.prompts[i] for i in todo], [self.problems[i] for i in todo],
                                    self.spec, seed, sigma, batches, self.task)
            cached = self._keep(cached, rows, todo, seed, sigma)
        return _wanted(cached, indices)

    def answers_many(self, members: list[tuple[int, float]], indices) -> list[pd.DataFrame]:
        """answers() for each of ``members``, in order, the members that miss the same problems decoded
        together (evaluate_members_together: engine.generate_members, block by block as answers() does).
        A member with nothing missing is read back; one whose missing problems no other member shares
        goes through answers()."""
        if len(set(members)) != len(members):
            raise ValueError(f"answers_many takes each member once, got {members}")
        cached = [answer_cache.load(self.cache_dir, seed, sigma) for seed, sigma in members]
        together: dict[tuple[int, ...], list[int]] = {}   # missing problems -> positions in members
        for m, table in enumerate(cached):
            todo = tuple(answer_cache.missing_problems(table, indices))
            if todo:
                together.setdefault(todo, []).append(m)
        for todo, group in together.items():
            if len(group) == 1:
                cached[group[0]] = self.answers(*members[group[0]], indices)
                continue
            engine = self._ensure_engine()
            todo, batches = self._blocks(list(todo))
            frames = evaluate_members_together(engine, [self.prompts[i] for i in todo],
                                               [self.problems[i] for i in todo], self.spec,
                                               [members[m] for m in group], batches, self.task)
            for m, rows in zip(group, frames):
                cached[m] = self._keep(cached[m], rows, todo, *members[m])
        return [_wanted(table, indices) for table in cached]

    def _blocks(self, todo: list[int]) -> tuple[list[int], list[list[int]]]:
        """The missing problems in answer-block order, and each block's positions in that order."""
        groups = group_by_block(todo, self.answer_blocks)
        todo = [i for group in groups for i in group]
        position = {problem: i for i, problem in enumerate(todo)}
        return todo, [[position[i] for i in g] for g in groups]

    def _keep(self, cached: pd.DataFrame, rows: pd.DataFrame, todo: list[int], seed: int,
              sigma: float) -> pd.DataFrame:
        """Member (seed, sigma)'s new rows (for problems ``todo``) written to the answer cache, counted, and added to
        what was cached."""
        rows.insert(2, "problem", todo)
        written = answer_cache.write_part(self.cache_dir, rows)
        cached = (pd.concat([cached, written], ignore_index=True) if len(cached) else written) \
            .sort_values("problem", kind="mergesort").reset_index(drop=True)
        self.slots_evaluated += len(todo)
        self.members_evaluated.append((int(seed), float(sigma)))
        return cached


def _wanted(cached: pd.DataFrame, indices) -> pd.DataFrame:
    wanted = set(int(i) for i in indices)
    return cached[cached["problem"].isin(wanted)].reset_index(drop=True)
