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


def test_the_cap_compares_the_whole_calls_answers_cut_there_with_a_call_made_at_it(tiny_model_dir):
    """--cap: the whole call's answers cut at the cap (answer_tail's cut, GSM8K's reward) against the capped call's,
    problem by problem: a capped answer that is the cut text agrees, one the engine wrote otherwise does not."""
    from transformers import AutoTokenizer

    from bench.vllm.batch_invariance import capped_agreement
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    problems = [{"id": f"train-{i}", "question": "q", "answer": "so #### 7"} for i in range(3)]
    long = "It is #### 7." + " and then we think about it again" * 12
    count = lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])
    whole = pd.DataFrame({"problem_id": ["train-0", "train-1", "train-2"], "completion": ["#### 7", long, long],
                          "correct": [True, True, True]}).assign(n_tokens=lambda f: f["completion"].map(count))
    cap = count("It is #### 7.") + 3          # the cut keeps the answer, and cuts the ramble after it
    cut = tokenizer.decode(tokenizer(long, add_special_tokens=False)["input_ids"][:cap], skip_special_tokens=True)
    capped = pd.DataFrame({"problem_id": ["train-0", "train-1", "train-2"], "completion": ["#### 7", cut, "#### 9"],
                           "correct": [True, True, False]})
    got = capped_agreement(whole, capped, problems, tokenizer, cap)
    assert (got["pairs_compared"], got["completions_differing"], got["correct_differing"]) == (3, 1, 1)
    assert (got["accuracy_a"], got["accuracy_b"]) == (1.0, 2 / 3)


def test_the_summary_adds_the_cap_where_it_was_measured():
    pair = {"pairs_compared": 4, "completions_differing": 1, "correct_differing": 0, "accuracy_a": 0.5, "accuracy_b": 0.5}
    member = {"whole_vs_split": pair, "whole_vs_again": pair, "whole_cut_vs_capped": pair,
              "seconds": {"whole": 2.0, "split": 3.0, "again": 2.0, "capped": 1.0}}
    got = summarize([member, member])
    assert got["whole_cut_vs_capped"]["share_completions_differing"] == 0.25 and got["capped_generate_s_median"] == 1.0


def test_a_cap_at_or_above_max_tokens_is_refused_before_any_engine(tmp_path, tiny_model_dir):
    from bench.vllm.batch_invariance import bench
    (tmp_path / "train.jsonl").write_text('{"id": "train-0", "question": "q", "answer": "#### 7"}\n')
    (tmp_path / "decode.json").write_text('{"max_tokens": 12}')
    with pytest.raises(SystemExit):
        bench(["--engine", "torch", "--model-dir", str(tiny_model_dir), "--train", str(tmp_path / "train.jsonl"),
               "--decode-json", str(tmp_path / "decode.json"), "--batch-invariant", "0", "--problems", "1",
               "--cap", "12", "--out", str(tmp_path)])
    assert not list(tmp_path.glob("batch_invariance_*.json"))
