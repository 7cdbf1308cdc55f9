"""The record's distill block (randopt/distill/summary.py) and its figure: distilled against base,
ensemble and control with paired-bootstrap intervals, on the vote's problem order."""
from __future__ import annotations

import pytest

from randopt.distill.summary import distill_round
from randopt.io import InputError
from randopt.records import plots
from randopt.records.statistics import ensemble_gain

IDS = [f"p{i}" for i in range(8)]
VOTE = {"problem_ids": IDS, "base_correct": [True, False, False, True, False, False, True, False],
        "ensemble_correct": {"0.25": [True, True, False, True, False, False, True, False]}}
BPB = {"base": 1.10, "ensemble": {"0.25": 1.08}}
DATA = {"round": 1, "fraction": 0.25, "k": 4, "n_train": 16, "rule": "...",
        "distilled": {"examples": 20, "problems": 9}, "control": {"examples": 20, "problems": 7, "with_replacement": True}}
MODELS = {arm: {"sha256": arm * 2, "base_sha256": "b", "data_sha256": "d", "steps": 6, "train_loss": 0.5}
          for arm in ("distilled", "control")}


def results(distilled, control, order=IDS):
    def one(correct):
        by_id = dict(zip(IDS, correct))
        return {"problem_ids": list(order), "correct": [by_id[p] for p in order], "bpb": 1.2}
    return {"distilled": one(distilled), "control": one(control)}


DISTILLED = [True, True, True, True, False, False, True, False]
CONTROL = [True, False, False, True, False, True, True, False]


def test_the_round_compares_distilled_with_base_ensemble_and_control_in_the_votes_order():
    shuffled = list(reversed(IDS))  # evaluate_distilled's rows in another order: aligned by problem id
    got = distill_round(VOTE, BPB, DATA, MODELS, results(DISTILLED, CONTROL, shuffled))
    assert got["test_accuracy"] == {"base": 3 / 8, "ensemble": 4 / 8, "distilled": 5 / 8, "control": 4 / 8}
    assert got["intervals"]["distilled_vs_base"] == ensemble_gain(VOTE["base_correct"], DISTILLED)
    assert got["intervals"]["distilled_vs_ensemble"] == ensemble_gain(VOTE["ensemble_correct"]["0.25"], DISTILLED)
    assert got["intervals"]["distilled_vs_control"] == ensemble_gain(CONTROL, DISTILLED)
    assert got["intervals"]["control_vs_base"]["gain"] == pytest.approx(1 / 8)
    assert got["sizes"] == {"n_train": 16, "n_test": 8, "distilled_examples": 20, "distilled_problems": 9,
                            "control_examples": 20, "control_problems": 7, "control_with_replacement": True}
    assert got["bpb"] == {"base": 1.10, "ensemble": 1.08, "distilled": 1.2, "control": 1.2}


def test_a_model_missing_test_answers_is_an_error():
    short = results(DISTILLED, CONTROL)
    short["control"] = {"problem_ids": IDS[:3], "correct": CONTROL[:3], "bpb": 1.0}
    with pytest.raises(InputError, match="control model has no answer for 5 test problems"):
        distill_round(VOTE, BPB, DATA, MODELS, short)


def test_the_figure_is_drawn_only_for_a_record_with_distillation(tmp_path):
    record = {"distill": {"rounds": [distill_round(VOTE, BPB, DATA, MODELS, results(DISTILLED, CONTROL))]}}
    assert "distill" in plots.figure_names(record) and "distill" not in plots.figure_names({})
    plots.distill(record).savefig(tmp_path / "distill.png")
    assert (tmp_path / "distill.png").stat().st_size > 1000
