import math

import numpy as np
import pandas as pd
import pytest

from randopt.bpb import bits_per_byte, ensemble_logprobs, model_bpb
from randopt.io import InputError
from randopt.rank import rank_population, top_k, union_members
from randopt.vote import answers_match, majority_vote


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
