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
    assert jobs.get("freeze_task") == 1 and "freeze_gsm8k" not in jobs
    record = run["record"]
    assert record["task"]["kind"] == kind
    assert record["data"]["n_train"] == 3 and record["data"]["n_test"] == 4
    assert len(record["data"]["train_sha256"]) == 64 and "gsm8k_train_sha256" not in record["data"]
    assert kind in record["data"]["synthetic_parts"] and "gsm8k" not in record["data"]["synthetic_parts"]
    assert record["task"]["synthetic"] is (kind == "countdown")
    assert "freeze_task" in record["timings_s"]
    assert f"| tiny-{kind} ({kind}) |" in run["records_md"]
    assert run["frozen_kinds"].count(kind) == 1
    assert 0.0 <= record["accuracy"]["base_test"] <= 1.0
