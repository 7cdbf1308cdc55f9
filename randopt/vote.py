"""Majority vote of the top-k members' extracted answers (docs/design.md, "Scoring").

Answers are compared numerically (as normalised by gsm8k.extract_answer). The most frequent valid
answer wins; a tie goes to the tied answer given by the best-ranked member; a problem where no member
gave a valid answer counts as wrong.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from fractions import Fraction


def _numeric_key(answer: str | None):
    if answer is None:
        return None
    try:
        return Fraction(answer)
    except (ValueError, ZeroDivisionError):
        return answer


def majority_vote(answers_in_rank_order: Sequence[str | None]) -> str | None:
    """The ensemble's answer from member answers listed best-ranked first."""
    keys = [_numeric_key(a) for a in answers_in_rank_order]
    counts = Counter(k for k in keys if k is not None)
    if not counts:
        return None
    best = max(counts.values())
    for key, answer in zip(keys, answers_in_rank_order):  # first in rank order among the tied
        if key is not None and counts[key] == best:
            return answer
    return None  # unreachable


def answers_match(answer: str | None, reference: str | None) -> bool:
    return answer is not None and reference is not None and _numeric_key(answer) == _numeric_key(reference)
