"""controls.random_members: a σ-stratified random pool (randopt/selection/random_pool.py) and the expectation of a
random k-vote over many of its k-subsets (randopt/records/random_expectation.py), on cases with known answers."""
import numpy as np
import pandas as pd
import pytest

from randopt.config import ConfigError, load_yaml, validate
from randopt.ensemble.majority_vote import ensemble_correct_by_winner
from randopt.keys import run_keys
from randopt.records.per_problem import per_problem_block
from randopt.records.random_expectation import (encode, expectation_statistics, random_expectation, stratified_subsets,
                                                subset_votes, versus_expectation)
from randopt.records.statistics import vote_correct
from randopt.selection.random_pool import pool_sizes, random_pool, sigma_counts
from randopt.selection.ranking import top_k
from tests.conftest import REPO
from tests.test_controls import ranked
from tests.support.blocks import block


def test_pool_sizes_scale_the_largest_lists_sigma_counts():
    # 19 members 1 / 11 / 7 at three σ, scaled to 40: 2.1, 23.2, 14.7 -> 2, 23, 14 and the one left to 14.7's σ
    assert pool_sizes({1e-3: 1, 5e-4: 11, 2e-3: 7}, 40, {1e-3: 64, 5e-4: 64, 2e-3: 64}) == {1e-3: 2, 5e-4: 23, 2e-3: 15}
    # never below the list's own count, never above what the population has
    assert pool_sizes({1e-3: 1, 5e-4: 11}, 12, {1e-3: 64, 5e-4: 10}) == {1e-3: 1, 5e-4: 10}
    with pytest.raises(ValueError, match="below the largest top-k list"):
        pool_sizes({1e-3: 1, 5e-4: 11}, 11, {1e-3: 64, 5e-4: 64})


def test_pool_is_stratified_seeded_and_blind_to_rewards_within_a_sigma():
    table = ranked(n_seeds=20, sigmas=(0.01, 0.02, 0.04))
    lists = top_k(table, [0.1, 0.25])
    pool = random_pool(table, lists, 30)
    largest = sigma_counts(lists[-1]["members"])
    assert sum(pool["per_sigma"].values()) == len(pool["members"]) == 30
    assert {float(s) for s in pool["per_sigma"]} == set(largest)
    assert all(pool["per_sigma"][repr(s)] >= c for s, c in largest.items())
    assert sigma_counts(pool["members"]) == {float(s): n for s, n in pool["per_sigma"].items()}
    assert len({(m["seed"], m["sigma"]) for m in pool["members"]}) == 30
    assert random_pool(table, lists, 30) == pool
    # other rewards, the same σ counts in the lists: the same members (within a σ the draw never sees a reward)
    shuffled = table.assign(train_reward=table["train_reward"].sample(frac=1, random_state=3).to_numpy())
    assert [(m["seed"], m["sigma"]) for m in random_pool(shuffled, lists, 30)["members"]] == \
        [(m["seed"], m["sigma"]) for m in pool["members"]]


def test_every_subset_has_the_lists_sigma_counts_and_no_member_twice():
    pool_sigmas = [0.01] * 6 + [0.02] * 4
    rows = stratified_subsets([0.02, 0.01, 0.01, 0.01], pool_sigmas, 200, np.random.default_rng(0))
    assert rows.shape == (200, 4)
    for row in rows:
        assert len(set(row)) == 4 and sorted(pool_sigmas[i] for i in row) == [0.01, 0.01, 0.01, 0.02]
    # a draw, not a fixed cut: every pool member turns up, and the order varies (it breaks the vote's ties)
    assert set(rows.ravel()) == set(range(10)) and len({tuple(r) for r in rows}) > 100
    again = stratified_subsets([0.02, 0.01, 0.01, 0.01], pool_sigmas, 200, np.random.default_rng(0))
    assert (again == rows).all()


def answers(n_members=12, n_problems=40, seed=0):
    rng = np.random.default_rng(seed)
    references = {f"p{j}": str(j % 3) for j in range(n_problems)}
    rows = []
    for m in range(n_members):
        for pid, ref in references.items():
            answer = None if rng.random() < 0.15 else str(rng.integers(0, 4))
            rows.append({"seed": m, "sigma": 0.01 if m < n_members // 2 else 0.02, "problem_id": pid,
                         "answer": answer, "correct": answer == ref})
    return pd.DataFrame(rows), references


def test_subset_votes_are_the_vote_stages_votes():
    table, references = answers()
    pool = [(m, 0.01 if m < 6 else 0.02) for m in range(12)]
    by_member = {key: dict(zip(f["problem_id"], f["answer"])) for key, f in table.groupby(["seed", "sigma"])}
    right_of = {key: dict(zip(f["problem_id"], f["correct"])) for key, f in table.groupby(["seed", "sigma"])}
    subsets = stratified_subsets([0.01] * 3 + [0.02] * 2, [g for _, g in pool], 60, np.random.default_rng(1))
    for by_winner in (False, True):
        votes = subset_votes(*encode(table, pool, references, by_winner), subsets)
        for row, vote in zip(subsets, votes):
            drawn = [pool[i] for i in row]
            expected = (ensemble_correct_by_winner([by_member[m] for m in drawn], [right_of[m] for m in drawn],
                                                   list(references)) if by_winner
                        else vote_correct([by_member[m] for m in drawn], references))
            assert vote.tolist() == expected


def test_versus_expectation_by_hand():
    # differences 0.5, 0.5, 0.5, -0.5: mean 0.25, sd 0.5, t = 1 on 3 df: two-sided p = 0.391002
    got = versus_expectation([True, True, True, False], [0.5, 0.5, 0.5, 0.5])
    assert got["gain"] == pytest.approx(0.25) and got["p_value"] == pytest.approx(0.391002, abs=1e-6)
    assert got["ci95"][0] <= 0.25 <= got["ci95"][1]
    assert versus_expectation([True, False], [1.0, 0.0])["p_value"] == 1.0   # equal to its expectation


def test_the_record_gives_the_mean_its_spread_and_the_top_k_vote_against_it():
    table, references = answers()
    pool = {"members": [{"seed": m, "sigma": 0.01 if m < 6 else 0.02} for m in range(12)]}
    topk = [{"fraction": 0.25, "k": 3, "members": [{"seed": 0, "sigma": 0.01}, {"seed": 1, "sigma": 0.01},
                                                     {"seed": 6, "sigma": 0.02}]}]
    vote = random_expectation(table, topk, pool, references, n_subsets=300)
    assert vote == random_expectation(table, topk, pool, references, n_subsets=300)   # seeded
    draw = vote["random_expectation"]["0.25"]
    assert draw["sigma_counts"] == {"0.01": 2, "0.02": 1} and len(draw["subset_test"]) == 300
    assert np.mean(draw["subset_test"]) == pytest.approx(np.mean(draw["expected_correct"]))
    vote["ensemble_correct"] = {"0.25": vote_correct([dict(zip(f["problem_id"], f["answer"])) for _, f in
                                               table[table["seed"].isin([0, 1, 6])].groupby("seed")], references)}
    vote["problem_ids"], vote["base_correct"], vote["member_test"] = list(references), [False] * 40, []
    stats = expectation_statistics(vote)["0.25"]
    assert stats["mean_test"] == pytest.approx(np.mean(draw["subset_test"])) and stats["sd_test"] > 0
    assert stats["range95"][0] <= stats["mean_test"] <= stats["range95"][1]
    assert stats["topk_vs_mean"]["gain"] == pytest.approx(np.mean(vote["ensemble_correct"]["0.25"]) - stats["mean_test"])
    assert stats["topk_vs_mean"]["p_holm"] == stats["topk_vs_mean"]["p_value"]   # one fraction: nothing to adjust
    assert stats["pool_members"] == 12
    block = per_problem_block(vote)
    assert block["random_expected_correct"]["0.25"] == draw["expected_correct"]
    assert len(block["random_pool_member_test"]) == 12


def test_the_pool_must_hold_the_largest_list_and_keys_only_the_population_when_on():
    config = load_yaml(REPO / "config" / "config.yaml")
    default = validate(config)
    largest = max(round(f * default["population"]["n_seeds"] * len(default["population"]["sigmas"]))
                  for f in default["topk"]["fractions"])
    with pytest.raises(ConfigError, match="controls.random_members"):
        validate(config | {"controls": {"random_members": largest - 1}})
    keys = run_keys(default, inputs={})
    assert run_keys(validate(config | {"controls": {"random_members": 0}}), inputs={}) == keys
    on = run_keys(validate(config | {"controls": {"random_members": largest}}), inputs={})
    assert {k for k in keys if keys[k] != on[k]} == {"population"}


def test_rank_writes_the_pool_only_when_asked(tmp_path):
    import json
    from randopt.stages.rank import main
    rng = np.random.default_rng(0)
    rows = pd.DataFrame([{"seed": s, "sigma": g, "correct": bool(rng.random() < 0.5), "n_tokens": 3}
                         for s in range(10) for g in (0.01, 0.02) for _ in range(4)])
    rows.to_parquet(tmp_path / "shard.parquet")
    args = ["--shards", str(tmp_path / "shard.parquet"), "--n-seeds", "10", "--sigmas", "0.01", "0.02",
            "--fractions", "0.1", "0.25", "--n-train", "4", "--selection-file", block(tmp_path, {"mode": "full"}),
            "--ranking", str(tmp_path / "ranking.parquet"), "--topk", str(tmp_path / "topk.json")]
    assert main(args) == 0
    assert "random_pool" not in json.loads((tmp_path / "topk.json").read_text())
    assert main(args + ["--random-members", "8"]) == 0
    written = json.loads((tmp_path / "topk.json").read_text())
    assert len(written["random_pool"]["members"]) == 8
    assert sum(written["random_pool"]["per_sigma"].values()) == 8
    assert main(args + ["--random-members", "4"]) == 2   # below the largest list's k of 5
