"""bench/real_model/answer_tail.py: what a lower max_tokens would cost, from a run's answers, cut with a real
(tiny, byte-level BPE) tokenizer and scored with GSM8K's reward."""
from __future__ import annotations

import json

import pandas as pd
import pytest
from transformers import AutoTokenizer

from bench.real_model import answer_tail
from randopt.io import InputError
from randopt.tasks.gsm8k import GSM8K

PROBLEMS = [{"id": f"train-{i}", "question": "q", "answer": "so #### 7"} for i in range(2)]


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    return AutoTokenizer.from_pretrained(tiny_model_dir)


def answers(tokenizer, rows) -> pd.DataFrame:
    """rows: (seed, part, problem, text); n_tokens as the tokenizer counts, correct as GSM8K scores the text."""
    task = GSM8K({})
    frame = pd.DataFrame(rows, columns=["seed", "part", "problem", "completion"]).assign(sigma=0.001)
    frame["n_tokens"] = [len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in frame["completion"]]
    frame["correct"] = [r.value >= 1.0 for r in task.score_all(list(frame["completion"]),
                                                                [PROBLEMS[p] for p in frame["problem"]])]
    return frame


def test_a_cap_cuts_long_answers_and_rescores_them(tokenizer):
    ramble = " and then we think about it again" * 12
    frame = answers(tokenizer, [
        (0, "a", 0, "7 apples. #### 7"),                       # short and right: never cut
        (0, "a", 1, "Count:" + ramble + " #### 7"),            # right only at its end: the cap loses it
        (1, "b", 0, "It is #### 7." + ramble),                 # right early, then rambles: the cut keeps it
        (1, "b", 1, "First #### 7." + ramble + " #### 8"),     # wrong at its end, right before the cut
    ])
    assert frame["correct"].tolist() == [True, True, True, False]
    cap = int(frame["n_tokens"].min()) + 8
    assert (frame["n_tokens"] > cap).tolist() == [False, True, True, True]
    report = answer_tail.tail(frame, PROBLEMS, tokenizer, [cap, 10_000], GSM8K({}), [0.5, 1.0])
    capped = report["caps"][str(cap)]
    assert (capped["cut"], capped["correct_lost"], capped["wrong_gained"]) == (0.75, 1, 1)
    assert capped["accuracy"] == 0.75 == report["accuracy"]
    assert capped["member_reward_moved_max"] == 0.5               # seed 0 lost one of two, seed 1 gained one
    # each member-call waits for its longest answer; the cap bounds both calls at `cap`
    longest = frame.groupby("part")["n_tokens"].max()
    assert capped["decode_steps_ratio"] == pytest.approx(2 * cap / longest.sum())
    # the selection: as run seed 0 (2 of 2) tops seed 1 (1 of 2); the cap swaps them, so top-1 keeps no one
    assert [[m["seed"] for m in t["members"]] for t in report["topk"]] == [[0], [0, 1]]
    assert capped["topk"] == [{"fraction": 0.5, "k": 1, "kept": 0}, {"fraction": 1.0, "k": 2, "kept": 2}]
    assert report["caps"]["10000"] | {"rank_correlation": None} == {
        "cut": 0.0, "accuracy": 0.75, "correct_lost": 0, "wrong_gained": 0, "member_reward_moved_mean": 0.0,
        "member_reward_moved_max": 0.0, "rank_correlation": None, "decode_steps_ratio": 1.0,
        "topk": [{"fraction": 0.5, "k": 1, "kept": 1}, {"fraction": 1.0, "k": 2, "kept": 2}]}
    assert report["caps"]["10000"]["rank_correlation"] == pytest.approx(1.0)   # nothing cut: the same ranking
    json.dumps(report, allow_nan=False)


def test_ties_in_the_capped_selection_go_to_the_fewer_tokens_the_cap_leaves(tokenizer):
    """Two members tie on reward once capped; the rank stage's tie-break (fewer generated tokens) then reads the
    capped lengths, as a capped run's tables would hold them, not the run's."""
    ramble = " and then we think about it again" * 12
    frame = answers(tokenizer, [
        (0, "a", 0, "#### 7"), (0, "a", 1, "Count:" + ramble + ramble + " #### 7"),   # right, longest: cut wrong
        (1, "b", 0, "#### 7"), (1, "b", 1, "Count:" + ramble + " #### 9"),            # wrong, shorter
    ])
    cap = int(frame["n_tokens"].iloc[3]) - 4
    report = answer_tail.tail(frame, PROBLEMS, tokenizer, [cap], GSM8K({}), [0.5])
    assert [m["seed"] for m in report["topk"][0]["members"]] == [0]
    # capped, both score 1 of 2 and both long answers stop at the cap: equal tokens, so sigma then seed: seed 0
    assert report["caps"][str(cap)]["topk"] == [{"fraction": 0.5, "k": 1, "kept": 1}]


def test_files_that_are_not_answer_tables_or_overlap_are_refused(tmp_path, tokenizer):
    frame = answers(tokenizer, [(0, "a", 0, "#### 7")])
    frame.to_parquet(tmp_path / "seeds_0000-0000.parquet")
    assert len(answer_tail.read_answers([str(tmp_path / "*.parquet")])) == 1
    frame.to_parquet(tmp_path / "part-again.parquet")
    with pytest.raises(InputError, match="appears twice"):
        answer_tail.read_answers([str(tmp_path / "*.parquet")])
    frame.drop(columns=["part"]).to_parquet(tmp_path / "other.parquet")
    with pytest.raises(InputError, match=r"lack columns \['part'\]"):
        answer_tail.read_answers([str(tmp_path / "other.parquet")])
    with pytest.raises(InputError, match="no answer files match"):
        answer_tail.read_answers([str(tmp_path / "none-*.parquet")])


def test_the_command_reads_a_runs_files_and_writes_its_report(tmp_path, tokenizer, tiny_model_dir):
    frame = answers(tokenizer, [(0, "a", 0, "It is #### 7." + " again" * 20), (0, "a", 1, "#### 9")])
    frame.to_parquet(tmp_path / "seeds_0000-0000.parquet")
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps(p) + "\n" for p in PROBLEMS))
    out = tmp_path / "tail.json"
    assert answer_tail.main(["--answers", str(tmp_path / "seeds_*.parquet"), "--train", str(train), "--tokenizer",
                             str(tiny_model_dir), "--caps", "6", "--fractions", "1", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["answers"] == 2 and report["member_calls"] == 1 and report["accuracy"] == 0.5
    assert report["caps"]["6"]["cut"] == 0.5 and report["answer_files"] == [str(tmp_path / "seeds_*.parquet")]
    assert report["caps"]["6"]["topk"] == [{"fraction": 1.0, "k": 1, "kept": 1}]
    with pytest.raises(InputError, match="has 1"):
        train.write_text(json.dumps(PROBLEMS[0]) + "\n")
        answer_tail.main(["--answers", str(tmp_path / "seeds_*.parquet"), "--train", str(train), "--tokenizer",
                          str(tiny_model_dir)])
