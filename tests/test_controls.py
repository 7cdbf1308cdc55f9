"""The controls (config key controls): a vote of k members drawn at random, against which the top-k vote's
gain is the selection's own, and the base model answering the test split in several batch compositions, whose
spread is the noise of a single base evaluation. The stages run for real on the tiny model."""
import json
import re

import numpy as np
import pandas as pd
import pytest

from randopt.config import ConfigError, load_yaml, validate
from randopt.keys import run_keys
from randopt.records.statistics import base_spread, record_statistics
from randopt.scoring.base_compositions import composition_batches
from randopt.selection.random_pool import random_pool
from randopt.selection.ranking import random_k, rank_population
from tests.conftest import REPO
from tests.test_stage_clis import dry_run
from tests.support.blocks import block


def ranked(n_seeds=20, sigmas=(0.01, 0.02), seed=0):
    rng = np.random.default_rng(seed)
    rows = pd.DataFrame([{"seed": s, "sigma": g, "correct": bool(rng.random() < 0.5), "n_tokens": 3}
                         for s in range(n_seeds) for g in sigmas for _ in range(4)])
    return rank_population(rows, n_seeds, list(sigmas))


def test_random_lists_nest_have_the_top_k_sizes_and_never_see_the_rewards():
    table = ranked()
    lists = random_k(table, [0.1, 0.25])
    assert [lst["k"] for lst in lists] == [4, 10]
    small, large = ([(m["seed"], m["sigma"]) for m in lst["members"]] for lst in lists)
    assert large[:4] == small and len(set(large)) == 10  # one draw, cut at each k
    assert random_k(table, [0.1, 0.25]) == lists  # seeded: a rerun draws the same
    other = ranked(seed=1)  # other rewards, so another ranking of the same population
    assert [(m["seed"], m["sigma"]) for m in random_k(other, [0.25])[0]["members"]] == large
    assert [(m["seed"], m["sigma"]) for m in random_k(table, [0.25], seed=5)[0]["members"]] != large
    ranks = dict(zip(zip(table["seed"], table["sigma"]), table["rank"]))
    assert all(m["rank"] == ranks[(m["seed"], m["sigma"])] for m in lists[1]["members"])


def test_each_composition_decodes_every_problem_once_in_its_own_calls():
    assert composition_batches(10, 1) is None  # the base's own evaluation: one call, the split's order
    for c in (2, 3, 4):
        calls = composition_batches(10, c)
        assert len(calls) == c and sorted(i for call in calls for i in call) == list(range(10))
        assert max(map(len, calls)) - min(map(len, calls)) <= 1
    assert composition_batches(10, 3) == composition_batches(10, 3)
    assert [i for call in composition_batches(10, 2) for i in call] != [i for call in composition_batches(10, 3) for i in call]
    assert len(composition_batches(2, 5)) == 2  # never an empty call


def test_base_spread_counts_the_problems_whose_result_moves():
    spread = base_spread([{"accuracy": 0.5, "correct": [True, False, True, False]},
                          {"accuracy": 0.75, "correct": [True, True, True, False]},
                          {"accuracy": 0.25, "correct": [False, False, True, False]}])
    assert spread["accuracies"] == [0.5, 0.75, 0.25] and spread["mean"] == 0.5
    assert spread["min"] == 0.25 and spread["max"] == 0.75 and spread["sd"] == pytest.approx(0.25)
    assert spread["problems_changing"] == 2  # problems 0 and 1; 2 is always right, 3 always wrong


def test_a_random_vote_fraction_must_be_a_top_k_fraction():
    with pytest.raises(ConfigError, match=re.escape("config key 'controls.random_vote': [0.3] not in topk.fractions")):
        validate({"controls": {"random_vote": [0.3]}})
    with pytest.raises(ConfigError, match=re.escape("config key 'controls.base_compositions'")):
        validate({"controls": {"base_compositions": 0}})


def test_controls_key_the_population_only_when_on():
    default = validate(load_yaml(REPO / "config" / "config.yaml"))
    keys = run_keys(default, inputs={})
    off = validate(load_yaml(REPO / "config" / "config.yaml") | {"controls": {"random_vote": [], "base_compositions": 1}})
    assert run_keys(off, inputs={}) == keys
    for on in ({"random_vote": [0.25]}, {"base_compositions": 2}):
        changed = run_keys(validate(load_yaml(REPO / "config" / "config.yaml") | {"controls": on}), inputs={})
        assert {k for k in keys if keys[k] != changed[k]} == {"population"}, on


def test_controls_reach_rank_and_evaluate_members_at_dag_build(tmp_path):
    proc = dry_run(tmp_path, {"controls": {"random_vote": [0.25], "base_compositions": 3, "random_members": 16}})
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert any("randopt.stages.rank " in line and "--random-vote 0.25 --random-members 16 " in line for line in lines)
    assert any("randopt.stages.evaluate_members " in line and "--base-compositions 3 " in line for line in lines)


def run_stage(module, *args):
    from importlib import import_module
    assert import_module(f"randopt.stages.{module}").main([str(a) for a in args]) == 0


def test_controls_are_answered_voted_and_reported(tmp_path, tiny_model_dir):
    """evaluate_members on the tiny model with a control list and three batch compositions, then vote and the
    record's statistics: the control members answer the test split beside the top-k ones, composition 1 is the
    base's own answers, and a second run evaluates nothing."""
    problems = [{"id": f"test-{i}", "question": f"What is {i} + {i}?", "answer": f"{i} + {i} = {2 * i}\n#### {2 * i}"}
                for i in range(5)]
    test = tmp_path / "test.jsonl"
    test.write_text("".join(json.dumps(p) + "\n" for p in problems))
    train = tmp_path / "train.jsonl"
    train.write_text(json.dumps(problems[0] | {"id": "train-0"}) + "\n")
    population = ranked(n_seeds=4, sigmas=(0.01,))
    top = [{"fraction": 0.5, "k": 2, "members": [
        {"seed": int(r.seed), "sigma": float(r.sigma), "train_reward": float(r.train_reward), "rank": int(r.rank)}
        for r in population.head(2).itertuples()]}]
    controls = random_k(population, [0.5])
    pool = random_pool(population, top, 3)   # controls.random_members: 3 members, k-subsets of 2
    (tmp_path / "topk.json").write_text(json.dumps({"topk": top, "controls": controls, "random_pool": pool}))
    out = tmp_path / "members"
    evaluate = ["--model-dir", tiny_model_dir, "--engine", "torch", "--engine-options-file", block(tmp_path, {"device": "cpu"}),
                "--decode-file", block(tmp_path, {"max_tokens": 6}), "--test", test, "--train", train,
                "--topk", tmp_path / "topk.json", "--cache-dir", out / "cache", "--out", out / "answers.parquet",
                "--timings", out / "timings.json", "--base-train-out", out / "base_train.json",
                "--base-compositions", 3, "--base-compositions-out", out / "compositions.json"]
    run_stage("evaluate_members", *evaluate)
    answers = pd.read_parquet(out / "answers.parquet")
    wanted = {(-1, 0.0)} | {(m["seed"], m["sigma"]) for lst in top + controls + [pool] for m in lst["members"]}
    assert set(zip(answers["seed"], answers["sigma"])) == wanted
    compositions = json.loads((out / "compositions.json").read_text())
    assert [c["calls"] for c in compositions["compositions"]] == [1, 2, 3]
    base = answers[answers["seed"] == -1].set_index("problem_id").loc[[p["id"] for p in problems]]
    assert compositions["compositions"][0]["correct"] == base["correct"].tolist()
    timings = json.loads((out / "timings.json").read_text())
    assert timings["evaluated"] == len(wanted) and timings["base_compositions_evaluated"] == 2
    run_stage("evaluate_members", *evaluate)  # everything cached now
    again = json.loads((out / "timings.json").read_text())
    assert again["evaluated"] == 0 and again["base_compositions_evaluated"] == 0

    run_stage("vote", "--answers", out / "answers.parquet", "--base-compositions", out / "compositions.json",
              "--topk", tmp_path / "topk.json", "--test", test, "--out", tmp_path / "vote.json")
    vote = json.loads((tmp_path / "vote.json").read_text())
    drawn = [(m["seed"], m["sigma"]) for m in controls[0]["members"]]
    mean = np.mean([answers[(answers["seed"] == s) & (answers["sigma"] == g)]["correct"].mean() for s, g in drawn])
    assert vote["control_member_mean_test"] == {"0.5": pytest.approx(mean)}
    assert len(vote["control_correct"]["0.5"]) == 5 and vote["control_test"]["0.5"] == np.mean(vote["control_correct"]["0.5"])
    stats = record_statistics(vote, population, 0.5)
    control = stats["random_vote"]["0.5"]
    assert control["k"] == 2 and [(m["seed"], m["sigma"]) for m in control["members"]] == drawn
    assert control["selection_gain"]["gain"] == pytest.approx(vote["ensemble_test"]["0.5"] - vote["control_test"]["0.5"])
    assert control["control_vs_base"]["gain"] == pytest.approx(vote["control_test"]["0.5"] - vote["base_test"])
    expectation = stats["random_expectation"]["0.5"]
    assert expectation["k"] == 2 and expectation["pool_members"] == 3 and expectation["n_subsets"] == 1000
    assert expectation["mean_test"] == pytest.approx(np.mean(vote["random_expectation"]["0.5"]["expected_correct"]))
    spread = stats["base_spread"]
    assert spread["accuracies"][0] == vote["base_test"] and len(spread["accuracies"]) == 3
