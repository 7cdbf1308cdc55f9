"""The record's statistics (randopt/records/statistics.py) on constructed cases with known answers."""
import math

import numpy as np
import pandas as pd
import pytest

from randopt.population import BASE
from randopt.io import InputError
from randopt.records.statistics import (ensemble_gain, k_curve, members_vs_base, per_problem_results, record_statistics,
                                selection)
from randopt.ensemble.majority_vote import answers_match, majority_vote


def test_identical_members_give_no_gain_a_zero_interval_and_p_one():
    correct = [True, False, True, True, False, False, True]
    assert ensemble_gain(correct, correct) == {"gain": 0.0, "ci95": [0.0, 0.0], "p_value": 1.0, "n_test": 7,
                                               "discordant": {"gained": 0, "lost": 0}, "few_discordant": True,
                                               "detectable_gain_80": None}


def test_sign_test_of_nine_to_one_discordant_problems():
    # 10 discordant problems, the ensemble right on 9: two-sided exact binomial p = 2 * (1 + 10) / 2**10.
    base = [False] * 9 + [True] + [True] * 5 + [False] * 5
    ensemble = [True] * 9 + [False] + [True] * 5 + [False] * 5
    result = ensemble_gain(base, ensemble)
    assert result["p_value"] == pytest.approx(0.021484375, abs=1e-12)
    assert result["gain"] == pytest.approx(8 / 20)
    assert result["n_test"] == 20
    assert result["discordant"] == {"gained": 9, "lost": 1}
    assert result["few_discordant"] is False   # 10 discordant: the bootstrap interval is not flagged


def test_bootstrap_interval_is_flagged_where_it_excludes_zero_but_the_exact_test_does_not():
    # 4 discordant problems, all won: the percentile interval excludes 0, the exact p is 2 / 2**4 = 0.125.
    base = [False] * 4 + [True] * 20 + [False] * 20
    ensemble = [True] * 4 + [True] * 20 + [False] * 20
    result = ensemble_gain(base, ensemble)
    assert result["ci95"][0] > 0
    assert result["p_value"] == pytest.approx(0.125)
    assert result["few_discordant"] is True
    assert result["detectable_gain_80"] is None   # no count of 4 reaches p <= 0.05


def test_sign_test_is_two_sided():
    base = [False] * 9 + [True]
    ensemble = [True] * 9 + [False]
    assert ensemble_gain(ensemble, base)["p_value"] == pytest.approx(ensemble_gain(base, ensemble)["p_value"])
    assert ensemble_gain(ensemble, base)["gain"] == pytest.approx(-0.8)


def test_bootstrap_interval_contains_the_gain_and_is_deterministic():
    rng = np.random.default_rng(0)
    base = rng.random(200) < 0.3
    ensemble = np.where(rng.random(200) < 0.8, base, ~base)  # paired: mostly the same problems right
    first, second = ensemble_gain(base, ensemble), ensemble_gain(base, ensemble)
    assert first == second
    low, high = first["ci95"]
    assert low < first["gain"] < high
    # The paired interval of a mean difference of +-1/0 values is about 2 * 1.96 * sd / sqrt(n) wide.
    diff = ensemble.astype(float) - base.astype(float)
    expected = 2 * 1.96 * diff.std(ddof=1) / math.sqrt(200)
    assert high - low == pytest.approx(expected, rel=0.15)


def test_gain_inputs_must_pair_up():
    with pytest.raises(ValueError, match="same test problems"):
        ensemble_gain([True, False], [True])
    with pytest.raises(ValueError, match="booleans"):
        ensemble_gain([0.5, 1], [1, 1])


def test_perfect_ranking_gives_rho_one_and_reversed_minus_one():
    train = [0.9, 0.7, 0.5, 0.2]
    assert selection(train, [0.8, 0.6, 0.55, 0.1]) == {"spearman_train_test": pytest.approx(1.0), "n_members": 4}
    assert selection(train, [0.1, 0.55, 0.6, 0.8])["spearman_train_test"] == pytest.approx(-1.0)


def test_rho_is_none_where_undefined():
    assert selection([0.5], [0.5]) == {"spearman_train_test": None, "n_members": 1}
    assert selection([0.5, 0.5, 0.5], [0.1, 0.2, 0.3])["spearman_train_test"] is None
    assert selection([0.1, 0.2, 0.3], [0.4, 0.4, 0.4])["spearman_train_test"] is None


def test_members_vs_base_per_sigma():
    ranking = pd.DataFrame({"seed": [0, 1, 2, 3, 0, 1],
                            "sigma": [0.001, 0.001, 0.001, 0.001, 5e-05, 5e-05],
                            "train_reward": [0.5, 0.25, 0.25, 0.0, 0.75, 0.25]})
    out = members_vs_base(ranking, base_train_reward=0.25)
    assert set(out) == {"0.001", "5e-05"}  # sigma as the config spells it
    small = out["0.001"]
    assert small["n"] == 4
    assert small["train_reward_mean"] == pytest.approx(0.25)
    assert small["train_reward_sd"] == pytest.approx(np.std([0.5, 0.25, 0.25, 0.0], ddof=1))
    assert small["frac_at_or_above_base"] == pytest.approx(0.75)
    assert small["frac_above_base"] == pytest.approx(0.25)
    assert out["5e-05"]["frac_at_or_above_base"] == 1.0 and out["5e-05"]["frac_above_base"] == 0.5
    assert members_vs_base(ranking.head(1), 0.25)["0.001"]["train_reward_sd"] is None


def test_members_vs_base_names_a_bad_table():
    with pytest.raises(InputError, match="train_reward"):
        members_vs_base(pd.DataFrame({"sigma": [0.1]}), 0.5)


REFERENCES = {"p1": "1", "p2": "2", "p3": "3", "p4": "4"}
# Best-ranked first. Member 0 is right on p1, p2; the vote of the first three is right on p1, p2, p3.
MEMBER_ANSWERS = [
    {"p1": "1", "p2": "2", "p3": "9", "p4": None},
    {"p1": "7", "p2": "2", "p3": "3", "p4": "8"},
    {"p1": "1", "p2": "5", "p3": "3", "p4": None},
    {"p1": "7", "p2": "5", "p3": "3", "p4": "8"},
]


def vote_accuracy_by_hand(members):
    return sum(answers_match(majority_vote([m.get(p) for m in members]), ref)
               for p, ref in REFERENCES.items()) / len(REFERENCES)


def test_k_curve_votes_like_the_vote_stage():
    curve = k_curve(MEMBER_ANSWERS, REFERENCES)
    assert [point["k"] for point in curve] == [1, 2, 3, 4]
    # k=1: p1, p2 right. k=2: p1 tie -> member 0's "1" (right), p2 right, p3 tie -> "9" wrong, p4 "8" wrong.
    # k=3: p1 "1" x2, p2 "2" x2, p3 "3" x2. k=4: p1 tie 2-2 -> member 0's "1"; p2 tie -> "2"; p3 "3" x3.
    assert [point["ensemble_test"] for point in curve] == [0.5, 0.5, 0.75, 0.75]
    for k, point in enumerate(curve, start=1):
        assert point["ensemble_test"] == vote_accuracy_by_hand(MEMBER_ANSWERS[:k])


def answers_table():
    rows = [{"seed": BASE, "sigma": 0.0, "problem_id": p, "answer": a, "correct": a == REFERENCES[p]}
            for p, a in zip(REFERENCES, ["1", "0", "0", np.nan])]
    for seed, answers in enumerate(MEMBER_ANSWERS):
        rows += [{"seed": seed, "sigma": 0.01, "problem_id": p, "answer": answers[p],
                  "correct": answers[p] == REFERENCES[p]} for p in REFERENCES]
    return pd.DataFrame(rows)


def topk_lists(ks=(2, 4)):
    return [{"fraction": k / 8, "k": k, "members": [{"seed": s, "sigma": 0.01} for s in range(k)]} for k in ks]


def test_per_problem_results_agree_with_the_k_curve_at_each_cut():
    out = per_problem_results(answers_table(), topk_lists(), REFERENCES, BASE)
    assert out["problem_ids"] == ["p1", "p2", "p3", "p4"]
    assert out["base_correct"] == [True, False, False, False]
    assert out["ensemble_correct"] == {"0.25": [True, True, False, False], "0.5": [True, True, True, False]}
    curve = {point["k"]: point["ensemble_test"] for point in out["k_curve"]}
    for lst in topk_lists():
        assert curve[lst["k"]] == np.mean(out["ensemble_correct"][repr(lst["fraction"])])
    assert [m["test_accuracy"] for m in out["member_test"]] == [0.5, 0.5, 0.5, 0.25]
    assert [m["rank"] for m in out["member_test"]] == [1, 2, 3, 4]


def test_per_problem_results_name_missing_members():
    table = answers_table()
    with pytest.raises(InputError, match="rerun evaluate_members"):
        per_problem_results(table[table["seed"] != 3], topk_lists(), REFERENCES, BASE)
    shuffled = topk_lists()
    shuffled[0]["members"].reverse()
    with pytest.raises(InputError, match="not a prefix"):
        per_problem_results(table, shuffled, REFERENCES, BASE)


def test_record_statistics_ties_the_parts_together():
    vote = per_problem_results(answers_table(), topk_lists(), REFERENCES, BASE)
    ranking = pd.DataFrame({"seed": [0, 1, 2, 3], "sigma": [0.01] * 4, "train_reward": [1.0, 0.75, 0.5, 0.25]})
    out = record_statistics(vote, ranking, base_train_reward=0.5)
    assert set(out) == {"ensemble_gain", "members_vs_base", "selection"}
    assert out["ensemble_gain"]["0.5"]["gain"] == pytest.approx(0.75 - 0.25)
    assert out["members_vs_base"]["0.01"]["frac_at_or_above_base"] == 0.75
    assert out["selection"]["n_members"] == 4
    # each fraction's exact p, Holm-adjusted over the record's fractions
    gains = out["ensemble_gain"]
    ordered = sorted(gains, key=lambda f: gains[f]["p_value"])
    assert gains[ordered[-1]]["p_holm"] == pytest.approx(max(min(1.0, (len(gains) - i) * gains[f]["p_value"])
                                                             for i, f in enumerate(ordered)))
    assert all(g["p_holm"] >= g["p_value"] for g in gains.values())
    # test accuracies 0.5, 0.5, 0.5, 0.25 against train 1, .75, .5, .25: ties average, rho = 3 / sqrt(5 * 3).
    assert out["selection"]["spearman_train_test"] == pytest.approx(3 / math.sqrt(15))
    with pytest.raises(InputError, match="rerun vote"):
        record_statistics({k: v for k, v in vote.items() if k != "base_correct"}, ranking, 0.5)
