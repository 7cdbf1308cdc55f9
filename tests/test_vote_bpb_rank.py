import math

import numpy as np
import pandas as pd
import pytest

from randopt.ensemble.bpb import bits_per_byte, ensemble_logprobs, model_bpb
from randopt.io import InputError
from randopt.scoring.member_cache import union_members
from randopt.selection.ranking import rank_population, top_k
from randopt.ensemble.majority_vote import answers_match, majority_vote


def test_majority_wins():
    assert majority_vote(["3", "5", "5", None]) == "5"


def test_tie_goes_to_the_best_ranked_member():
    assert majority_vote(["7", "5", "5", "7"]) == "7"
    assert majority_vote(["5", "7", "7", "5"]) == "5"


def test_votes_compare_numerically():
    assert majority_vote(["18", "18.0", "3"]) == "18"


def test_no_valid_answer_counts_as_wrong():
    assert majority_vote([None, None]) is None
    assert not answers_match(None, "4")
    assert answers_match("4.0", "4")


def test_bits_per_byte_by_hand():
    # 10 bytes with total NLL of 10 * ln 2 nats is exactly one bit per byte.
    assert bits_per_byte(10 * math.log(2), 10) == pytest.approx(1.0)
    assert model_bpb(np.full(4, -math.log(2), np.float32), 8) == pytest.approx(0.5)
    with pytest.raises(ValueError):
        bits_per_byte(1.0, 0)


def test_ensemble_of_identical_members_equals_the_member():
    lp = np.log(np.array([0.5, 0.25, 0.9], np.float32))
    np.testing.assert_allclose(ensemble_logprobs([lp, lp, lp]), lp, rtol=1e-6)


def test_ensemble_averages_probabilities_not_logs():
    a, b = np.log([0.9]), np.log([0.1])
    np.testing.assert_allclose(np.exp(ensemble_logprobs([a, b])), [0.5])


def _rows(rewards: dict[tuple[int, float], list[bool]]) -> pd.DataFrame:
    return pd.DataFrame([{"seed": s, "sigma": g, "correct": c, "n_tokens": 10}
                         for (s, g), cs in rewards.items() for c in cs])


def test_rank_orders_by_reward_then_deterministically():
    rows = _rows({(0, 0.1): [True, False], (1, 0.1): [True, True], (0, 0.2): [False, False], (1, 0.2): [True, False]})
    ranked = rank_population(rows, n_seeds=2, sigmas=[0.1, 0.2])
    assert list(zip(ranked.seed, ranked.sigma)) == [(1, 0.1), (0, 0.1), (1, 0.2), (0, 0.2)]
    lists = top_k(ranked, [0.25, 0.5])
    assert [lst["k"] for lst in lists] == [1, 2]
    assert union_members(lists) == [(1, 0.1), (0, 0.1)]


def test_rank_refuses_an_incomplete_population():
    rows = _rows({(0, 0.1): [True]})
    with pytest.raises(InputError, match="no shard rows"):
        rank_population(rows, n_seeds=2, sigmas=[0.1])


def test_rank_breaks_reward_ties_by_fewer_tokens_then_sigma_then_seed():
    """Equal train reward: the member that generated fewer tokens ranks first (a terser model that is as
    right); equal reward and tokens: smaller sigma, then smaller seed."""
    rows = pd.DataFrame([
        {"seed": 0, "sigma": 0.1, "correct": True, "n_tokens": 30},
        {"seed": 1, "sigma": 0.1, "correct": True, "n_tokens": 12},   # same reward as seed 0, fewer tokens
        {"seed": 0, "sigma": 0.2, "correct": True, "n_tokens": 12},   # ties seed 1 / 0.1 on tokens: sigma decides
        {"seed": 1, "sigma": 0.2, "correct": False, "n_tokens": 1},   # fewest tokens, lower reward: last
    ])
    ranked = rank_population(rows, n_seeds=2, sigmas=[0.1, 0.2])
    assert list(zip(ranked.seed, ranked.sigma)) == [(1, 0.1), (0, 0.2), (0, 0.1), (1, 0.2)]
    assert list(ranked["rank"]) == [1, 2, 3, 4]
    assert list(ranked.gen_tokens) == [12, 12, 30, 1]
    same = pd.DataFrame([{"seed": s, "sigma": 0.1, "correct": True, "n_tokens": 5} for s in (1, 0)])
    assert list(rank_population(same, n_seeds=2, sigmas=[0.1]).seed) == [0, 1]  # then seed ascending


def test_vote_stage_gives_members_to_the_vote_in_rank_order(tmp_path):
    """The vote CLI on hand-made tables: two members tie 1-1 on every problem, so the tie-break (the
    best-ranked member's answer) decides. The best-ranked member has the larger seed and its rows come
    last in the answers table, so any order but rank order (seed order, table order) votes wrong."""
    import json
    import subprocess
    import sys

    from randopt.io import atomic_path, write_json_atomic
    from tests.conftest import REPO

    test = tmp_path / "test.jsonl"
    problems = [{"id": f"test-{i}", "question": f"q{i}", "answer": f"so {i + 10}\n#### {i + 10}"} for i in range(3)]
    test.write_text("".join(json.dumps(p) + "\n" for p in problems))
    best, second = (7, 0.01), (2, 0.01)  # rank 1 is seed 7
    rows = [{"seed": -1, "sigma": 0.0, "problem_id": p["id"], "answer": "0", "correct": False} for p in problems]
    rows += [{"seed": second[0], "sigma": second[1], "problem_id": p["id"], "answer": "99", "correct": False}
             for p in problems]
    rows += [{"seed": best[0], "sigma": best[1], "problem_id": p["id"], "answer": str(i + 10), "correct": True}
             for i, p in enumerate(problems)]
    with atomic_path(tmp_path / "answers.parquet") as tmp:
        pd.DataFrame(rows).to_parquet(tmp, index=False)
    members = [{"seed": best[0], "sigma": best[1], "train_reward": 0.5, "rank": 1},
               {"seed": second[0], "sigma": second[1], "train_reward": 0.5, "rank": 2}]
    write_json_atomic(tmp_path / "topk.json", {"topk": [{"fraction": 0.5, "k": 2, "members": members}]})
    write_json_atomic(tmp_path / "compositions.json", {"problem_ids": [p["id"] for p in problems], "compositions": [
        {"composition": 1, "calls": 1, "accuracy": 0.0, "correct": [False] * 3}]})
    proc = subprocess.run([sys.executable, "-m", "randopt.stages.vote", "--answers", str(tmp_path / "answers.parquet"),
                           "--base-compositions", str(tmp_path / "compositions.json"),
                           "--topk", str(tmp_path / "topk.json"), "--test", str(test), "--out", str(tmp_path / "v.json")],
                          cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    vote = json.loads((tmp_path / "v.json").read_text())
    assert vote["ensemble_test"] == {"0.5": 1.0}  # every tie went to rank 1's (right) answer
    assert vote["member_mean_test"] == {"0.5": 0.5} and vote["base_test"] == 0.0

