"""record["per_problem"] (randopt/records/per_problem.py): the vectors a record's statistics come from, so that
every gain and p in the record can be recomputed from the file."""
import pytest

from randopt.io import InputError
from randopt.population import BASE
from randopt.records.per_problem import per_problem_block
from randopt.records.statistics import control_results, ensemble_gain, per_problem_results, record_statistics
from tests.test_statistics import REFERENCES, answers_table, topk_lists

import pandas as pd

RANKING = pd.DataFrame({"seed": [0, 1, 2, 3], "sigma": [0.01] * 4, "train_reward": [1.0, 0.75, 0.5, 0.25]})
# a control list drawn in another order than the ranking: members 3 and 1
CONTROLS = [{"fraction": 0.25, "k": 2, "members": [{"seed": 3, "sigma": 0.01}, {"seed": 1, "sigma": 0.01}]}]


def vote_output(controls=False, compositions=1):
    vote = per_problem_results(answers_table(), topk_lists(), REFERENCES, BASE)
    if controls:
        vote |= control_results(answers_table(), CONTROLS, REFERENCES)
        vote["control_members"] = {"0.25": CONTROLS[0]["members"]}
    vote["base_compositions"] = [{"composition": c + 1, "correct": vote["base_correct"]} for c in range(compositions)]
    return vote


def test_every_gain_and_p_in_the_statistics_is_recomputed_from_the_block():
    vote = vote_output(controls=True)
    block, stats = per_problem_block(vote), record_statistics(vote, RANKING, 0.5)
    assert block["problem_ids"] == list(REFERENCES)
    for fraction, correct in block["ensemble_correct"].items():
        assert ensemble_gain(block["base_correct"], correct) == {k: v for k, v in stats["ensemble_gain"][fraction].items()
                                                                 if k != "p_holm"}
    control = stats["random_vote"]["0.25"]
    assert ensemble_gain(block["control_correct"]["0.25"], block["ensemble_correct"]["0.25"])["p_value"] == \
        control["selection_gain"]["p_value"]
    # the drawn members' own accuracies, in drawn order: member 3 right on p3 only, member 1 on p2, p3
    assert block["control_member_test"] == [{"seed": 3, "sigma": 0.01, "test_accuracy": 0.25},
                                            {"seed": 1, "sigma": 0.01, "test_accuracy": 0.5}]
    assert control["control_member_mean_test"] == pytest.approx(0.375)
    assert [m["test_accuracy"] for m in block["member_test"]] == [0.5, 0.5, 0.5, 0.25]


def test_a_run_without_controls_has_only_the_always_keys():
    assert set(per_problem_block(vote_output())) == {"problem_ids", "base_correct", "ensemble_correct", "member_test"}
    block = per_problem_block(vote_output(compositions=3))
    assert block["base_compositions_correct"] == [block["base_correct"]] * 3


def test_an_older_or_torn_vote_output_is_refused():
    vote = vote_output()
    del vote["member_test"]
    with pytest.raises(InputError, match="rerun vote"):
        per_problem_block(vote)
    vote = vote_output()
    vote["ensemble_correct"]["0.25"] = vote["ensemble_correct"]["0.25"][:-1]
    with pytest.raises(InputError, match="not all of its problem_ids"):
        per_problem_block(vote)


def test_comparisons_recompute_every_paired_statistic_of_the_record():
    from randopt.records.comparisons import comparisons
    vote = vote_output(controls=True)
    vote |= {"sc_correct": {"0.25": [False, True, True, False]}, "sc_test": {"0.25": 0.5}, "sc_k": {"0.25": 2},
             "sc_not_sampled": ["0.5"], "sc_k_curve": [], "sc_sampling": {"samples": 2}}
    stats = record_statistics(vote, RANKING, 0.5)
    got = comparisons({"per_problem": per_problem_block(vote)})
    assert got["topk_vs_base"] == stats["ensemble_gain"]
    assert got["random_vs_base"]["0.25"] == stats["random_vote"]["0.25"]["control_vs_base"]
    assert got["topk_vs_random"]["0.25"] == stats["random_vote"]["0.25"]["selection_gain"]
    assert got["sc_vs_base"]["0.25"] == stats["self_consistency"]["by_fraction"]["0.25"]["sc_vs_base"]
    assert got["topk_vs_sc"]["0.25"] == stats["self_consistency"]["by_fraction"]["0.25"]["topk_vs_sc"]
