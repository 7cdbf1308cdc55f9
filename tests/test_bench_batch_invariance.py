"""bench/vllm/batch_invariance.py's comparison of one member's answers under two call compositions, on
constructed answer sets (the measurement itself needs vLLM on a GPU)."""
from __future__ import annotations

import pandas as pd
import pytest

from bench.vllm.batch_invariance import agreement, summarize
from randopt.io import InputError


def answers(completions: list[str], correct: list[bool], order: list[int] | None = None) -> pd.DataFrame:
    rows = [{"problem_id": f"train-{i}", "completion": c, "correct": ok}
            for i, (c, ok) in enumerate(zip(completions, correct))]
    return pd.DataFrame([rows[i] for i in (order or range(len(rows)))])


def test_answers_are_compared_problem_by_problem_whatever_order_the_calls_returned_them_in():
    whole = answers(["a", "b", "c", "d"], [True, True, False, False])
    split = answers(["a", "b*", "c*", "d"], [True, False, False, False], order=[2, 0, 3, 1])
    got = agreement(whole, split)
    assert got == {"pairs_compared": 4, "completions_differing": 2, "correct_differing": 1,
                   "share_completions_differing": 0.5, "share_correct_differing": 0.25,
                   "accuracy_a": 0.5, "accuracy_b": 0.25}
    assert agreement(whole, whole.iloc[::-1])["completions_differing"] == 0


def test_answer_sets_of_other_problems_are_refused():
    with pytest.raises(ValueError, match="other problems"):
        agreement(answers(["a", "b"], [True, True]), answers(["a"], [True]))
    other = answers(["a", "b"], [True, True]).assign(problem_id=["train-0", "train-9"])
    with pytest.raises(InputError, match="no full-arm answer"):
        agreement(answers(["a", "b"], [True, True]), other)


def test_the_summary_pools_the_members_answers_and_takes_median_seconds():
    def member(moved_split, moved_again, seconds):
        n = 4
        pair = lambda moved: {"pairs_compared": n, "completions_differing": moved, "correct_differing": moved // 2,
                              "accuracy_a": 0.5, "accuracy_b": 0.5 + moved / (2 * n)}
        return {"whole_vs_split": pair(moved_split), "whole_vs_again": pair(moved_again),
                "seconds": {"whole": seconds, "split": 2 * seconds, "again": seconds}}
    got = summarize([member(2, 0, 1.0), member(1, 0, 3.0), member(3, 0, 2.0)])
    assert got["whole_vs_split"]["share_completions_differing"] == 6 / 12
    assert got["whole_vs_split"]["share_correct_differing"] == 2 / 12
    assert got["whole_vs_again"]["share_completions_differing"] == 0.0
    assert got["whole_vs_split"]["reward_changes"] == [0.25, 0.125, 0.375]
    assert (got["whole_generate_s_median"], got["split_generate_s_median"]) == (2.0, 4.0)
