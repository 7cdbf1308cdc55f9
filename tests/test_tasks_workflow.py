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


def test_runs_one_after_another_keep_their_own_records_figures_rows_and_answers(task_runs_started, tmp_path):
    """The task runs, one config after another in one folder: each run's record and figures stay in its own
    folder (results/runs/<run key>), untouched by the runs after it; results/record.json is the last run's;
    RECORDS.md has one row per run under its own name; and ask, told a run's folder, answers with that run's
    task and prompt (its completions are the ones that run's evaluate_members wrote)."""
    import json

    import pandas as pd

    from randopt.io import read_json, read_jsonl
    from randopt.keys import run_keys
    from randopt.paths import layout
    from randopt.records.plots import FIGURES, OPTIONAL
    from randopt.stages.ask import main as ask_main

    runs = task_runs_started.result()
    finished = [kind for kind in TASKS if "error" not in runs[kind]]
    assert len(finished) >= 2, {kind: runs[kind].get("error") for kind in TASKS}
    workdir = runs[finished[0]]["workdir"]
    folders = {kind: workdir / runs[kind]["record"]["run"]["dir"] for kind in finished}
    assert len(set(folders.values())) == len(finished)
    for earlier, later in zip(finished, finished[1:] + [None]):
        folder = folders[earlier]
        # results/record.json, read right after the run, was its copy; the later runs left the folder as it was
        assert read_json(folder / "record.json") == runs[earlier]["record"]
        drawn = [folder / "figures" / f"{name}.png" for name in FIGURES if name not in OPTIONAL]
        assert all(p.is_file() for p in drawn) and (folder / "figures" / "figures.md").is_file()
        recorded = (folder / "record.json").stat().st_mtime
        assert all(p.stat().st_mtime >= recorded for p in drawn)  # drawn from this run's record
        if later is not None:  # and never redrawn by a later run
            assert all(p.stat().st_mtime <= (folders[later] / "record.json").stat().st_mtime for p in drawn)
    last = finished[-1]
    assert (workdir / "results" / "record.json").read_bytes() == (folders[last] / "record.json").read_bytes()
    rows = [line for line in runs[last]["records_md"].splitlines() if "| results/runs/" in line]
    assert len(rows) == len(finished)
    names = [line.split(" | ")[1] for line in rows]
    assert len(set(names)) == len(names) == len(finished)
    for kind in finished:
        assert sum(line.endswith(f"| {runs[kind]['record']['run']['dir']} |") for line in rows) == 1

    for kind in finished[:2]:
        record = runs[kind]["record"]
        keys = run_keys(record["config"])
        problem = read_jsonl(workdir / layout(keys)["problems"] / "test.jsonl")[0]
        questions, out = tmp_path / f"{kind}.jsonl", tmp_path / f"{kind}.out.jsonl"
        questions.write_text(json.dumps(problem) + "\n")
        fraction = record["topk"][-1]["fraction"]
        assert ask_main(["--run", str(folders[kind]), "--fraction", str(fraction), "--questions", str(questions),
                         "--out", str(out)]) == 0
        (result,) = read_jsonl(out)
        table = pd.read_parquet(workdir / layout(keys)["members"] / keys["population"] / "answers.parquet")
        mine = {(r.seed, r.sigma): r.completion for r in table.itertuples() if r.problem_id == problem["id"]}
        members = [(m["seed"], m["sigma"]) for m in record["topk"][-1]["members"]]
        assert [(m["seed"], m["sigma"]) for m in result["members"]] == members
        assert [m["completion"] for m in result["members"]] == [mine[m] for m in members]
