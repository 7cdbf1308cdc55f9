"""The distillation datasets: which completions of which train problems a LoRA is fine-tuned on.

Distilled: per train problem, the correct completions of the distilled top-k list's members, read from
the search's answer cache (randopt/scoring/answer_cache.py: nothing is generated again), best-ranked
member first, identical texts once, at most per_problem of them. Keeping up to n per problem instead of
the vote's winner alone keeps the members' different correct solutions; the cap and the deduplication
stop a problem that many members solve alike from outweighing the rest.

Control: the base model's correct samples of the same problems, kept by the same rule, then resampled
to exactly the distilled dataset's size, so the two fine-tunes differ in where their data came from and
in nothing else.
"""
from __future__ import annotations

import numpy as np

from randopt.io import InputError
from randopt.scoring import answer_cache

# What a dataset row holds: the train problem (row of the frozen split), the prompt as the scorer builds
# it (the chat template around the question), the completion trained on, and who wrote it.
FIELDS = ("problem", "problem_id", "prompt", "completion", "source")


class NoCorrectCompletions(InputError):
    """A dataset with nothing to train on: the message names the round and how to get some."""


def keep_per_problem(candidates: list[dict], per_problem: int) -> list[dict]:
    """Candidates (rows in preference order) -> at most per_problem distinct completions per problem, in
    problem order, each problem's in the order given."""
    kept: dict[int, list[dict]] = {}
    for row in candidates:
        rows = kept.setdefault(row["problem"], [])
        if len(rows) < per_problem and all(r["completion"] != row["completion"] for r in rows):
            rows.append(row)
    return [row for problem in sorted(kept) for row in kept[problem]]


def member_candidates(cache_dir: str, members: list[dict], prompts: list[str]) -> list[dict]:
    """Every correct train completion of the members (a top-k list's, best first) from the answer cache,
    in rank order. A member with no cached answers is an error: the search had not finished."""
    rows = []
    for m in members:
        cached = answer_cache.load(cache_dir, m["seed"], m["sigma"])
        if cached.empty:
            raise InputError(f"{cache_dir}: no cached train answers for member seed {m['seed']} sigma {m['sigma']}; "
                             "rerun the search (evaluate_shard or racing) before distill_data")
        source = f"seed={int(m['seed'])}_sigma={m['sigma']!r}"
        for r in cached[cached["correct"]].itertuples():
            rows.append({"problem": int(r.problem), "problem_id": r.problem_id, "prompt": prompts[int(r.problem)],
                         "completion": r.completion, "source": source})
    return rows


def resample_to(rows: list[dict], size: int, seed: int) -> tuple[list[dict], bool]:
    """Exactly `size` of the rows, seeded: without replacement when there are enough, else every row
    once and the rest drawn with replacement. Returns (rows in problem order, whether any repeats)."""
    if not rows:
        raise ValueError("nothing to resample")
    rng = np.random.default_rng(seed)
    if len(rows) >= size:
        picked = sorted(rng.choice(len(rows), size=size, replace=False).tolist())
        return [rows[i] for i in picked], False
    extra = rng.choice(len(rows), size=size - len(rows), replace=True).tolist()
    picked = sorted(list(range(len(rows))) + extra)
    return [rows[i] for i in picked], True


def require_rows(rows: list[dict], what: str, round_index: int, fix: str) -> None:
    if not rows:
        raise NoCorrectCompletions(f"distill round {round_index}: {what} has no correct completion of any train "
                                   f"problem, so there is nothing to fine-tune on; {fix}")


# The fixes a user has, named in the errors (issue 29: more members, a larger train split, a higher sigma range).
DISTILLED_FIX = ("get some with more members (population.n_seeds), a larger train split (n_train), a higher "
                 "sigma range (population.sigmas), a larger top-k (distill.fraction) or more tokens (decode.max_tokens)")
CONTROL_FIX = ("draw more samples (distill.control.samples_per_problem), sample at another temperature "
               "(distill.control.temperature), or use a larger train split (n_train)")
