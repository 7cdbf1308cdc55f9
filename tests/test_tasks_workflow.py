"""Each task end to end through Snakemake on the CPU (tiny random Qwen2, a few problems and seeds):
the record names its task and reads correctly for it. The runs, one per task in one folder, are
queued in the background from the session's start (tests/support/task_runs.py; tests/conftest.py)."""
from __future__ import annotations

import pytest

from tests.support.task_runs import TASKS
from tests.support.workflow import jobs_run

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("kind", TASKS)
def test_a_task_runs_end_to_end_and_its_record_names_it(task_runs_started, kind):
    runs = task_runs_started.result()
    if "error" in runs[kind]:
        raise runs[kind]["error"]
    run = runs[kind]
    jobs = jobs_run(run["proc"])
    assert jobs.get("freeze_problems") == 1
    record = run["record"]
    assert record["task"]["kind"] == kind
    assert record["data"]["n_train"] == 3 and record["data"]["n_test"] == 4
    assert len(record["data"]["train_sha256"]) == 64 and "gsm8k_train_sha256" not in record["data"]
    assert kind in record["data"]["synthetic_parts"] and "gsm8k" not in record["data"]["synthetic_parts"]
    assert record["task"]["synthetic"] is (kind == "countdown")
    assert "freeze_problems" in record["timings_s"]
    assert f"| tiny-{kind} ({kind}) |" in run["records_md"]
    assert run["frozen_kinds"].count(kind) == 1
    assert 0.0 <= record["accuracy"]["base_test"] <= 1.0


def test_ask_answers_and_rewards_with_the_runs_task(task_runs_started, tmp_path):
    """python -m randopt.stages.ask on the Countdown run's own test problems: each member's completion is the
    one evaluate_members wrote, its answer is Countdown's extraction and its reward Countdown's (1 where
    the table says correct), and the ensemble is the vote stage's (pooled by value, right when the
    winner was). The same problems given as bare fields (numbers, target) render to the same prompts."""
    import json

    import pandas as pd

    from randopt.result.finished_run import ask, default_model_dir
    from randopt.io import read_json, read_jsonl
    from randopt.keys import run_keys
    from randopt.paths import layout
    from randopt.stages.ask import main as ask_main

    runs = task_runs_started.result()
    if "error" in runs["countdown"]:
        raise runs["countdown"]["error"]
    run, workdir = runs["countdown"], runs["countdown"]["workdir"]
    record_path = tmp_path / "record.json"  # results/record.json is the last task's run
    record_path.write_text(json.dumps(run["record"]))
    keys = run_keys(run["record"]["config"])
    paths = layout(keys)
    problems = read_jsonl(workdir / paths["problems"] / "test.jsonl")
    model_dir = default_model_dir(workdir / "results" / "record.json")  # the model's key holds no task
    entry = run["record"]["topk"][-1]
    results = ask(record_path, entry["fraction"], problems, model_dir)

    table = pd.read_parquet(workdir / paths["members"] / keys["population"] / "answers.parquet")
    table["answer"] = table["answer"].astype(object).where(table["answer"].notna(), None)
    rows = {(r.seed, r.sigma, r.problem_id): r for r in table.itertuples()}
    members = [(m["seed"], m["sigma"]) for m in entry["members"]]
    vote = read_json(workdir / paths["vote"] / "vote.json")
    ensemble_right = dict(zip(vote["problem_ids"], vote["ensemble_correct"][repr(entry["fraction"])]))
    for problem, result in zip(problems, results):
        assert result["question"] == problem["question"]
        assert [(m["seed"], m["sigma"]) for m in result["members"]] == members
        expected = [rows[(*m, problem["id"])] for m in members]
        assert [m["completion"] for m in result["members"]] == [r.completion for r in expected]
        assert [m["answer"] for m in result["members"]] == [r.answer for r in expected]
        assert [m["reward"] == 1.0 for m in result["members"]] == [bool(r.correct) for r in expected]
        assert all((m["reason"] is None) == (m["reward"] == 1.0) for m in result["members"])
        assert (result["reward"] == 1.0) == ensemble_right[problem["id"]]
    assert any(m["reason"] for r in results for m in r["members"])  # a tiny random model: mostly wrong

    # bare fields, through the CLI: the template renders the frozen question, so the same completions
    bare = tmp_path / "bare.jsonl"
    bare.write_text("".join(json.dumps({"numbers": p["numbers"], "target": p["target"]}) + "\n" for p in problems))
    out = tmp_path / "out.jsonl"
    assert ask_main(["--record", str(record_path), "--fraction", str(entry["fraction"]), "--model-dir", str(model_dir),
                     "--questions", str(bare), "--out", str(out)]) == 0
    again = read_jsonl(out)
    assert [r["question"] for r in again] == [p["question"] for p in problems]
    assert [[m["completion"] for m in r["members"]] for r in again] == \
        [[m["completion"] for m in r["members"]] for r in results]
    assert all(r["reward"] is None and all(m["reward"] is None for m in r["members"]) for r in again)
