"""Each task end to end through Snakemake on the CPU (tiny random Qwen2, a few problems and seeds):
the record names its task and reads correctly for it."""
from __future__ import annotations

import json

import pytest

from tests.support.workflow import jobs_run, read_record, run_workflow, tiny_config
from tests.test_tasks import FIXTURE

pytestmark = pytest.mark.slow

SPLITS = {"n_train": 3, "n_test": 4}


def task_config(model_dir, kind: str, block: dict) -> dict:
    config = tiny_config(model_dir, task={"kind": kind, kind: {**SPLITS, **block}},
                         population={"n_seeds": 2, "sigmas": [0.01], "shard_size": 2}, topk={"fractions": [0.5, 1.0]})
    del config["gsm8k"]  # GSM8K's block: an error beside another task (randopt/config.py says what to write)
    config["run_name"] = f"tiny-{kind}"
    return config


def tasks(tmp_path_factory) -> dict:
    """Each task's block on a reduced protocol (few problems; the workflow test's tiny model and seeds)."""
    rows = [{"question": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(10)]
    questions = tmp_path_factory.mktemp("jsonl") / "questions.jsonl"
    questions.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return {
        "countdown": {"n_numbers": 3, "max_number": 20, "max_target": 60, "n_train_pool": 20, "n_test_pool": 20},
        "jsonl": {"path": str(questions), "match": "numeric"},
        "math": {"source": "jsonl", "jsonl": {"path": str(FIXTURE)}},
        "code": {"timeout_s": 2, "memory_mb": 256},
    }


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """One folder for every task's run: the prepared model and the held-out slice are made once (their
    keys do not hold the task), and each task's outputs lie under its own keys beside the others'."""
    return tmp_path_factory.mktemp("tasks")


@pytest.mark.parametrize("kind", ["countdown", "jsonl", "math", "code"])
def test_a_task_runs_end_to_end_and_its_record_names_it(workdir, tiny_model_dir, tmp_path_factory, kind):
    tmp_path = workdir
    proc = run_workflow(tmp_path, task_config(tiny_model_dir, kind, tasks(tmp_path_factory)[kind]))
    jobs = jobs_run(proc)
    assert jobs.get("freeze_task") == 1 and "freeze_gsm8k" not in jobs
    record = read_record(tmp_path)
    assert record["task"]["kind"] == kind
    assert record["data"]["n_train"] == 3 and record["data"]["n_test"] == 4
    assert len(record["data"]["train_sha256"]) == 64 and "gsm8k_train_sha256" not in record["data"]
    assert kind in record["data"]["synthetic_parts"] and "gsm8k" not in record["data"]["synthetic_parts"]
    assert record["task"]["synthetic"] is (kind == "countdown")
    assert "freeze_task" in record["timings_s"]
    assert f"| tiny-{kind} ({kind}) |" in (tmp_path / "RECORDS.md").read_text()
    frozen = [json.loads(p.read_text()) for p in (tmp_path / "data" / "tasks").glob("*/manifest.json")]
    assert [m["task"]["kind"] for m in frozen].count(kind) == 1
    assert 0.0 <= record["accuracy"]["base_test"] <= 1.0
