"""Racing in the real workflow (selection.mode racing; rules/racing.smk), on the tiny model.

The tiny random model answers nothing right, so it cannot show a race. The first round's answers are
therefore put in the answer cache beforehand, as an earlier run would have left them: four members
answer that slice perfectly and four wrongly (wide margins). The rest is the real thing: Snakemake's
rounds, the decisions, and the tiny model generating every later answer. One work dir, in order:

1. racing: round 0 is read from the cache (no engine starts), the four weak members stop, the four
   others answer the remaining problems; the record says what was spent;
2. full evaluation: it generates exactly the problems racing skipped and ranks the same top-k;
3. racing again with another miss_budget: every answer comes from the cache, no engine starts.
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from tests.support.racing_runs import N_TRAIN, RACING, STRONG, config_with
from tests.support.workflow import effective_config, jobs_run

pytestmark = pytest.mark.slow


def timings(workdir, folder: str) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((workdir / folder).rglob("*.timings.json"))]


def top_sets(topk: dict) -> list[set]:
    return [{(m["seed"], m["sigma"]) for m in lst["members"]} for lst in topk["topk"]]


@pytest.fixture(scope="module")
def race(racing_workflow_started):
    """The three runs in one work dir (tests/support/racing_runs.py, race_in_one_dir), made in the
    background from the session's start (tests/conftest.py)."""
    return racing_workflow_started.result()


def test_racing_runs_in_rounds_and_stops_the_weak_members(race):
    workdir, paths = race["workdir"], race["paths"]["racing"]
    assert jobs_run(race["runs"]["racing"]).keys() >= {"race_slice", "race_round", "rank", "record"}
    assert jobs_run(race["runs"]["racing"])["race_slice"] == 3 * 2 and "evaluate_shard" not in jobs_run(race["runs"]["racing"])
    rounds = [json.loads((workdir / paths["race"] / f"round={r:02d}" / "survivors.json").read_text()) for r in range(3)]
    assert {tuple(m) for m in rounds[0]["dropped"]} == {m for m in ((s, g) for s in range(4) for g in (0.01, 0.02))} - STRONG
    assert [r["report"]["problems_seen"] for r in rounds] == [6, 12, 24]
    chunks = timings(workdir, paths["race"])
    round0 = [t for t in chunks if t["round"] == 0]
    assert all(not t["engine_started"] and t["slots_evaluated"] == 0 for t in round0)  # all in the cache
    # the strong members answered the 18 problems after round 0, nobody else anything
    assert sum(t["slots_evaluated"] for t in chunks) == 4 * 18
    assert sorted(tuple(m) for t in chunks for m in t["members_evaluated"]) == sorted(list(STRONG) * 2)  # rounds 1, 2
    ranking = pd.read_parquet(workdir / paths["rank"] / "ranking.parquet")
    complete = ranking[~ranking["partial"]]
    assert set(zip(complete["seed"], complete["sigma"])) == STRONG and (complete["n_problems"] == N_TRAIN).all()
    assert (ranking[ranking["partial"]]["n_problems"] == 6).all() and ranking["rank"].tolist()[:4] == [1, 2, 3, 4]
    assert ranking["partial"].tolist() == [False] * 4 + [True] * 4     # partial members rank last


def test_the_record_says_what_racing_spent(race):
    selection = race["record"]["selection"]
    assert selection["mode"] == "racing" and selection["dropped_per_round"] == [4, 0, 0]
    assert selection["slots_evaluated"] == 4 * N_TRAIN + 4 * 6 and selection["slots_full"] == 8 * N_TRAIN
    assert selection["problems_per_member"]["members_by_problems"] == {"6": 4, str(N_TRAIN): 4}
    assert selection["gen_tokens_full_estimate"] > selection["gen_tokens"]
    throughput = race["record"]["throughput"]
    assert throughput["train_slots_evaluated_this_run"] == 4 * 18
    assert "race_slice" in race["record"]["timings_s"] and "evaluate_shard" not in race["record"]["timings_s"]


def test_full_evaluation_after_racing_generates_only_what_racing_skipped(race):
    workdir, paths = race["workdir"], race["paths"]
    assert jobs_run(race["runs"]["full"]).get("evaluate_shard") == 2
    shards = timings(workdir, paths["full"]["shards"] + "/sigma=0.01") + timings(workdir, paths["full"]["shards"] + "/sigma=0.02")
    assert sum(t["slots_evaluated"] for t in shards) == 4 * 18          # the weak members' 18 skipped problems
    evaluated = sorted(tuple(m) for t in shards for m in t["members_evaluated"])
    assert set(evaluated) == {(s, g) for s in range(4) for g in (0.01, 0.02)} - STRONG
    full = json.loads((workdir / paths["full"]["rank"] / "topk.json").read_text())
    racing = json.loads((workdir / paths["racing"]["rank"] / "topk.json").read_text())
    assert top_sets(full) == top_sets(racing)
    # a complete racing member's reward is its full-evaluation reward (the same cached answers)
    by_member = pd.read_parquet(workdir / paths["full"]["rank"] / "ranking.parquet").set_index(["seed", "sigma"])
    for m in racing["topk"][-1]["members"]:
        assert by_member.loc[(m["seed"], m["sigma"]), "train_reward"] == m["train_reward"]
    # no (member, problem) was generated twice: every member's parts hold disjoint problems
    cache = workdir / paths["full"]["answer_cache"]
    for folder in cache.glob("sigma=*/seed=*"):
        problems = np.concatenate([pd.read_parquet(p)["problem"].to_numpy() for p in folder.glob("part-*.parquet")])
        assert len(problems) == len(set(problems)) == N_TRAIN, folder


def test_racing_again_with_other_knobs_generates_nothing(race):
    workdir, paths = race["workdir"], race["paths"]["again"]
    assert paths["race"] != race["paths"]["racing"]["race"]
    assert jobs_run(race["runs"]["again"])["race_slice"] == 3 * 2
    chunks = timings(workdir, paths["race"])
    assert all(not t["engine_started"] and t["slots_evaluated"] == 0 for t in chunks)


def test_status_reports_the_rounds_of_a_race(race, tiny_model_dir):
    from randopt.stages.status import report
    text = report(race["workdir"], effective_config(config_with(tiny_model_dir, RACING)))
    assert text.splitlines()[0] == "racing: 3/3 rounds decided, 4 of 8 members racing, search finished"
    assert "round 0:     6 problems seen,      8 racing,      4 stopped" in text


def test_a_racing_record_reports_its_recall_of_a_full_run_of_the_same_population(race, tiny_model_dir):
    """The first racing run had no full evaluation beside it: recall_of_full is null. After the full run in
    the same directory, a racing run's record takes the full ranking as its input, and reports both recalls
    (randopt/selection/recall.py) of each top-k list."""
    from randopt.io import read_json
    from randopt.stages.record import racing_recall
    from tests.support.workflow import run_workflow
    assert race["record"]["selection"]["recall_of_full"] is None
    workdir, paths = race["workdir"], race["paths"]
    again = config_with(tiny_model_dir, RACING | {"miss_budget": 0.3})
    proc = run_workflow(workdir, again, "-n", "-p", "results/record.json")
    command = next(line for line in proc.stdout.splitlines() if "randopt.stages.record " in line)
    full_ranking, full_topk = f"{paths['full']['rank']}/ranking.parquet", f"{paths['full']['rank']}/topk.json"
    assert f"--full-ranking {full_ranking} --full-topk {full_topk}" in command
    ranked = read_json(workdir / paths["again"]["rank"] / "topk.json")
    recall = racing_recall(ranked, str(workdir / paths["again"]["rank"] / "ranking.parquet"), str(workdir / full_ranking),
                           str(workdir / full_topk))["recall_of_full"]
    assert {f: (r["k"], r["recall"], r["recall_plain"]) for f, r in recall.items()} == {"0.25": (2, 1.0, 1.0),
                                                                                        "0.5": (4, 1.0, 1.0)}
    # the record reads its own ranking for the members it stopped: what the stops alone leave is never below
    # the recall of the list it made from the others
    assert {f: r["recall_of_stops"] for f, r in recall.items()} == {"0.25": 1.0, "0.5": 1.0}
