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
    # the lists the capped rewards cut, whole (the test vote reads them): the cap put seed 1 first
    assert [[m["seed"] for m in t["members"]] for t in capped["topk_lists"]] == [[1], [1, 0]]
    assert report["caps"]["10000"] | {"rank_correlation": None, "topk_lists": None} == {
        "cut": 0.0, "accuracy": 0.75, "correct_lost": 0, "wrong_gained": 0, "member_reward_moved_mean": 0.0,
        "member_reward_moved_max": 0.0, "rank_correlation": None, "decode_steps_ratio": 1.0,
        "topk": [{"fraction": 0.5, "k": 1, "kept": 1}, {"fraction": 1.0, "k": 2, "kept": 2}], "topk_lists": None}
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


TEST = [{"id": f"test-{i}", "question": "q", "answer": "so #### 7"} for i in range(3)]


def member_answers(tokenizer, rows) -> pd.DataFrame:
    """evaluate_members' table: rows (seed, sigma, problem index, text); answer and correct as GSM8K reads the text."""
    task = GSM8K({})
    frame = pd.DataFrame(rows, columns=["seed", "sigma", "problem", "completion"])
    frame["problem_id"] = [TEST[p]["id"] for p in frame.pop("problem")]
    frame["answer"] = [task.extract(t) for t in frame["completion"]]
    frame["correct"] = [r.value >= 1.0 for r in task.score_all(list(frame["completion"]),
                                                                [TEST[int(p[5:])] for p in frame["problem_id"]])]
    frame["n_tokens"] = [len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in frame["completion"]]
    return frame


def listing(fraction, members) -> dict:
    return {"fraction": fraction, "k": len(members), "members": [{"seed": s, "sigma": 0.001} for s in members]}


def test_the_votes_on_test_read_every_answer_cut_at_the_cap(tokenizer):
    """Three members and the base on three test problems. Member 1 is right on problems 1 and 2 only at the end of a
    long answer, so the cap takes both; the base is right early in a long answer, which the cut keeps. The top-1
    vote (member 0) keeps its answers; the top-3 vote loses problem 1, where member 1's and member 2's right answers
    were two votes of three and the cut leaves a tie that the best-ranked member's wrong answer wins, and keeps
    problem 2, where members 0 and 2 still agree."""
    ramble = " and then we think about it again" * 12
    rows = [(-1, 0.0, p, "It is #### 7." + ramble) for p in range(3)]                      # base: right, cut keeps it
    rows += [(0, 0.001, 0, "#### 7"), (0, 0.001, 1, "#### 8"), (0, 0.001, 2, "#### 7")]
    rows += [(1, 0.001, 0, "#### 7"), (1, 0.001, 1, "Count:" + ramble + " #### 7"),
             (1, 0.001, 2, "Count:" + ramble + " #### 7")]
    rows += [(2, 0.001, 0, "#### 5"), (2, 0.001, 1, "#### 7"), (2, 0.001, 2, "#### 7")]
    table = member_answers(tokenizer, rows)
    cap = int(table["n_tokens"].min()) + 8
    lists = [listing(0.34, [0]), listing(1.0, [0, 1, 2])]
    report = answer_tail.vote_with_caps(table, TEST, lists, tokenizer, [cap, 10_000], GSM8K({}))
    assert (report["members_answered"], report["n_test"], report["test_answers"]) == (3, 3, 12)
    capped = report["caps"][str(cap)]
    assert capped["cut"] == 5 / 12                                                    # the base's three, member 1's two
    assert capped["base"] | {"difference_ci95": None, "p_value": None} == {
        "as_run": 1.0, "capped": 1.0, "difference": 0.0, "difference_ci95": None, "p_value": None,
        "problems_disagreeing": 0}
    top1, top3 = capped["run_lists"]["0.34"], capped["run_lists"]["1.0"]
    assert (top1["as_run"], top1["capped"], top1["problems_disagreeing"]) == (2 / 3, 2 / 3, 0)
    assert (top3["as_run"], top3["capped"], top3["problems_disagreeing"]) == (1.0, 2 / 3, 1)
    assert top3["difference"] == pytest.approx(-1 / 3) and top3["difference_ci95"][0] < 0
    assert all(c["difference"] == 0.0 for c in report["caps"]["10000"]["run_lists"].values())
    json.dumps(report, allow_nan=False)


def test_the_capped_selection_votes_where_the_run_answered_its_members(tokenizer):
    rows = [(-1, 0.0, p, "#### 7") for p in range(3)] + [(0, 0.001, p, "#### 7") for p in range(3)]
    rows += [(1, 0.001, p, "#### 8") for p in range(3)]
    table = member_answers(tokenizer, rows)
    lists = [listing(0.5, [1]), listing(1.0, [1, 0])]
    report = answer_tail.vote_with_caps(table, TEST, lists, tokenizer, [4, 5], GSM8K({}),
                                        {4: [listing(0.5, [0]), listing(1.0, [0, 1])],
                                         5: [listing(0.5, [0]), listing(1.0, [0, 3])]})
    # the cap would select member 0 first, which the run answered: its vote against the run's (member 1)
    assert report["caps"]["4"]["capped_lists"]["0.5"] | {"difference_ci95": None, "p_value": None} == {
        "as_run": 0.0, "capped": 1.0, "difference": 1.0, "difference_ci95": None, "p_value": None,
        "problems_disagreeing": 3}
    # member 3 never answered the test split: that list has no vote, and the report says why; the short list has
    assert report["caps"]["5"]["capped_lists"]["1.0"] == {"members_without_test_answers": 1}
    assert report["caps"]["5"]["capped_lists"]["0.5"]["capped"] == 1.0
    with pytest.raises(InputError, match="not the run's"):
        answer_tail.vote_with_caps(table, TEST, lists, tokenizer, [4], GSM8K({}), {4: [listing(0.25, [0])] * 2})
    with pytest.raises(InputError, match="test split lacks"):
        answer_tail.vote_with_caps(table, TEST[:2], lists, tokenizer, [4], GSM8K({}))


def test_the_command_votes_on_test_from_a_runs_files(tmp_path, tokenizer, tiny_model_dir):
    frame = answers(tokenizer, [(0, "a", 0, "#### 7"), (0, "a", 1, "#### 7")])
    frame.to_parquet(tmp_path / "seeds_0000-0000.parquet")
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps(p) + "\n" for p in PROBLEMS))
    test = tmp_path / "test.jsonl"
    test.write_text("".join(json.dumps(p) + "\n" for p in TEST))
    member_answers(tokenizer, [(-1, 0.0, p, "#### 7") for p in range(3)] + [(0, 0.001, p, "#### 7") for p in range(3)]
                 ).to_parquet(tmp_path / "answers.parquet")
    (tmp_path / "topk.json").write_text(json.dumps({"topk": [listing(1.0, [0])]}))
    common = ["--answers", str(tmp_path / "seeds_*.parquet"), "--train", str(train), "--tokenizer", str(tiny_model_dir),
              "--caps", "6", "--test-answers", str(tmp_path / "answers.parquet")]
    with pytest.raises(SystemExit):     # the test answers without the split or the lists they were voted in
        answer_tail.main(common)
    out = tmp_path / "tail.json"
    assert answer_tail.main([*common, "--test", str(test), "--topk", str(tmp_path / "topk.json"), "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    # the run's fractions from its topk.json; the capped selection (member 0 again) votes as the run did
    assert report["caps"]["6"]["topk"] == [{"fraction": 1.0, "k": 1, "kept": 1}]
    assert report["vote"]["caps"]["6"]["run_lists"]["1.0"]["as_run"] == 1.0
    assert report["vote"]["caps"]["6"]["capped_lists"]["1.0"]["difference"] == 0.0


def test_the_estimate_is_checked_against_a_run_made_at_the_cap(tmp_path, tokenizer, tiny_model_dir):
    """The run at the cap wrote the cut answers but one, which its batch moved (another, wrong answer): the check
    counts that one on train, the test answers agree, and the estimated votes and lists are the run's."""
    ramble = " and then we think about it again" * 12
    train_rows = [(0, "a", 0, "#### 7"), (0, "a", 1, "It is #### 7." + ramble), (1, "b", 0, "#### 8"),
                  (1, "b", 1, "Count:" + ramble + " #### 7")]
    frame = answers(tokenizer, train_rows)
    cap = int(frame["n_tokens"].min()) + 8
    frame.to_parquet(tmp_path / "seeds_0000-0001.parquet")
    cut = answer_tail.cut_answers(frame, "problem", lambda p: PROBLEMS[int(p)], tokenizer, cap, GSM8K({}))
    moved = cut.copy()
    moved.loc[0, ["completion", "correct"]] = ["#### 9", False]        # the batch moved one answer of member 0
    (tmp_path / "at_cap").mkdir()
    moved.to_parquet(tmp_path / "at_cap" / "seeds_0000-0001.parquet")
    test_rows = [(-1, 0.0, p, "It is #### 7." + ramble) for p in range(3)] + [(0, 0.001, p, "#### 7") for p in range(3)]
    table = member_answers(tokenizer, test_rows)
    table.to_parquet(tmp_path / "answers.parquet")
    answer_tail.cut_answers(table, "problem_id", {t["id"]: t for t in TEST}.__getitem__, tokenizer, cap, GSM8K({})
                            ).to_parquet(tmp_path / "at_cap" / "answers.parquet")
    (tmp_path / "topk.json").write_text(json.dumps({"topk": [listing(0.5, [0])]}))
    (tmp_path / "at_cap" / "topk.json").write_text(json.dumps({"topk": [listing(0.5, [0])]}))
    for name, rows in (("train.jsonl", PROBLEMS), ("test.jsonl", TEST)):
        (tmp_path / name).write_text("".join(json.dumps(p) + "\n" for p in rows))
    out = tmp_path / "tail.json"
    argv = ["--answers", str(tmp_path / "seeds_*.parquet"), "--train", str(tmp_path / "train.jsonl"),
            "--tokenizer", str(tiny_model_dir), "--caps", "10000", "--test-answers", str(tmp_path / "answers.parquet"),
            "--test", str(tmp_path / "test.jsonl"), "--topk", str(tmp_path / "topk.json"), "--out", str(out)]
    with pytest.raises(SystemExit):     # a run to check against, without the cap it ran at
        answer_tail.main([*argv, "--check-run", str(tmp_path / "at_cap" / "seeds_*.parquet"),
                          str(tmp_path / "at_cap" / "answers.parquet"), str(tmp_path / "at_cap" / "topk.json")])
    assert answer_tail.main([*argv, "--check-cap", str(cap), "--check-run", str(tmp_path / "at_cap" / "seeds_*.parquet"),
                             str(tmp_path / "at_cap" / "answers.parquet"), str(tmp_path / "at_cap" / "topk.json")]) == 0
    report = json.loads(out.read_text())
    assert str(cap) in report["caps"]                                   # the checked cap is estimated too
    train = report["check"]["train"]
    assert (train["pairs_compared"], train["completions_differing"], train["correct_differing"]) == (4, 1, 1)
    assert (train["accuracy_cut"], train["accuracy_run"]) == (0.5, 0.25)     # the ramble to "#### 7" is cut
    assert report["check"]["lists_kept"] == {"0.5": 1}
    checked = report["vote"]["caps"][str(cap)]["check"]
    assert checked["answers"]["completions_differing"] == 0 and checked["answers"]["pairs_compared"] == 6
    assert checked["base"] == {"estimated": 1.0, "run": 1.0}
    assert checked["lists_kept"] == {"0.5": 1}
    assert checked["votes"] == {"0.5": {"estimated": 1.0, "run": 1.0, "problems_disagreeing": 0}}
    # estimated lists holding a member this run never answered the test split for: the run's vote, no estimate
    report = answer_tail.vote_with_caps(table, TEST, [listing(0.5, [0])], tokenizer, [cap], GSM8K({}),
                                        {cap: [listing(0.5, [3])]},
                                        {"cap": cap, "table": table, "lists": [listing(0.5, [0])]})
    assert report["caps"][str(cap)]["check"]["votes"] == {"0.5": {"estimated": None, "run": 1.0,
                                                                  "problems_disagreeing": None}}
    assert report["caps"][str(cap)]["capped_lists"] == {"0.5": {"members_without_test_answers": 1}}
