"""Majority vote of the top-k members' extracted answers (docs/design.md, "Scoring").

Answers are compared numerically (as normalised by gsm8k.extract_answer). The most frequent valid
answer wins; a tie goes to the tied answer given by the best-ranked member; a problem where no member
gave a valid answer counts as wrong.

For a task other than GSM8K (randopt/tasks/), answers are pooled by the task's vote key (Countdown's
expressions by value, say) and the vote is right when the winning member's own answer earned full
reward: its reference may be no single string (any expression reaching the target; a function that
passes the tests; an answer math-verify finds equivalent). For GSM8K both rules agree.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from fractions import Fraction


def numeric_key(answer: str | None):
    """The key answers are pooled and matched by: a number as an exact Fraction (so 3, 3.0 and 6/2 agree), else the text."""
    if answer is None:
        return None
    try:
        return Fraction(answer)
    except (ValueError, ZeroDivisionError):
        return answer


def majority_vote(answers_in_rank_order: Sequence[str | None]) -> str | None:
    """The ensemble's answer from member answers listed best-ranked first."""
    keys = [numeric_key(a) for a in answers_in_rank_order]
    counts = Counter(k for k in keys if k is not None)
    if not counts:
        return None
    best = max(counts.values())
    for key, answer in zip(keys, answers_in_rank_order):  # first in rank order among the tied
        if key is not None and counts[key] == best:
            return answer
    return None  # unreachable


def answers_match(answer: str | None, reference: str | None) -> bool:
    return answer is not None and reference is not None and numeric_key(answer) == numeric_key(reference)


def ensemble_correct(answers_in_rank_order: Sequence[Mapping[str, str | None]],
                     references: Mapping[str, str]) -> list[bool]:
    """Per test problem (in the order of references), whether the majority vote of these members is
    right. answers_in_rank_order holds one {problem_id: answer} per member, best-ranked first; a
    member without an answer to a problem abstains on it."""
    return [answers_match(majority_vote([member.get(problem_id) for member in answers_in_rank_order]), reference)
            for problem_id, reference in references.items()]


def majority_index(keys_in_rank_order: Sequence) -> int | None:
    """The position of the vote's winner among keys listed best-ranked first (None abstains): the most
    frequent key, a tie going to the best-ranked member among the tied; None when all abstain."""
    counts = Counter(k for k in keys_in_rank_order if k is not None)
    if not counts:
        return None
    best = max(counts.values())
    return next(i for i, k in enumerate(keys_in_rank_order) if k is not None and counts[k] == best)


def ensemble_correct_by_winner(keys_in_rank_order: Sequence[Mapping[str, object]],
                               correct_in_rank_order: Sequence[Mapping[str, bool]],
                               problem_ids: Sequence[str]) -> list[bool]:
    """Per test problem, whether the vote's winning member (by vote key) was itself right."""
    out = []
    for problem_id in problem_ids:
        winner = majority_index([member.get(problem_id) for member in keys_in_rank_order])
        out.append(winner is not None and bool(correct_in_rank_order[winner].get(problem_id, False)))
    return out
