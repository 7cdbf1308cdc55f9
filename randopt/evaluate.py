"""Scoring a model (base or perturbed) on GSM8K problems: prompts in, per-problem rows out.

One function does the work for train shards, test members and the base model, so every number in
the record comes from the same prompt, decode and extraction.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import pandas as pd

from randopt.config import check_decode
from randopt.engines.base import Engine
from randopt.data.gsm8k import extract_answer, is_correct
from randopt.member_cache import BASE, switch_weights  # noqa: F401  (BASE: the tables' base row)


@dataclass(frozen=True)
class DecodeSpec:
    max_tokens: int
    stop: tuple[str, ...]
    system: str | None
    examples: tuple[tuple[str, str], ...]

    @classmethod
    def from_config(cls, decode: dict) -> "DecodeSpec":
        """From the config's decode block or a --decode argument, checked against the schema's
        definitions.decode (defaults filled): a bad key is an error naming it before any engine loads."""
        decode = check_decode(decode)
        return cls(max_tokens=int(decode["max_tokens"]), stop=tuple(decode["stop"]), system=decode.get("system"),
                   examples=tuple(tuple(e) for e in decode.get("examples", ())))


def build_prompts(engine: Engine, problems: list[dict], spec: DecodeSpec) -> list[str]:
    return [engine.chat_prompt(p["question"], spec.system, list(spec.examples)) for p in problems]


def score_completions(problems: list[dict], completions) -> list[dict]:
    return [{"problem_id": p["id"], "answer": extract_answer(c.text), "correct": bool(is_correct(c.text, p["answer"])),
             "n_tokens": c.n_tokens, "finish": c.finish, "completion": c.text}
            for p, c in zip(problems, completions)]


def evaluate_weights(engine: Engine, prompts: list[str], problems: list[dict], spec: DecodeSpec,
                     seed: int, sigma: float) -> pd.DataFrame:
    """Set the weights to (seed, sigma), or base for seed == BASE, and score every problem."""
    t0 = time.perf_counter()
    switch_weights(engine, seed, sigma)
    t1 = time.perf_counter()
    completions = engine.generate(prompts, spec.max_tokens, list(spec.stop))
    t2 = time.perf_counter()
    rows = pd.DataFrame(score_completions(problems, completions))
    rows.insert(0, "sigma", float(sigma))
    rows.insert(0, "seed", int(seed))
    rows["switch_s"] = t1 - t0
    rows["generate_s"] = t2 - t1
    return rows
