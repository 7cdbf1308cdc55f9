"""distill.enabled through Snakemake on the tiny protocol: the DAG gains exactly the distillation jobs,
a LoRA target the model lacks fails at DAG build, and a search with no correct answer stops at
distill_data with the error that names the round and the fixes (on problems whose answers the tiny random
model cannot guess: the full run on SmolLM2 is bench/distill/README.md's)."""
from __future__ import annotations

import subprocess

import pytest

from tests.support.workflow import (failure_report, jobs_run, run_workflow, tiny_config, unguessable_gsm8k,
                                    workflow_command)

pytestmark = pytest.mark.slow  # Snakemake runs, as the other workflow tests

DISTILL = {"enabled": True, "lora": {"rank": 4, "target_modules": ["q_proj", "v_proj"]},
           "train": {"epochs": 1, "max_length": 64}, "control": {"samples_per_problem": 2}}


def dry_run(workdir, config):
    return subprocess.run(workflow_command(workdir, config, "-n", "--quiet", "rules"), capture_output=True, text=True)


def test_the_dag_gains_the_distillation_jobs_and_checks_the_lora_targets(tmp_path, tiny_model_dir):
    off = dry_run(tmp_path / "off", tiny_config(tiny_model_dir))
    on = dry_run(tmp_path / "on", tiny_config(tiny_model_dir, distill=DISTILL))
    assert off.returncode == 0 and on.returncode == 0, on.stderr[-3000:]
    off_jobs, on_jobs = jobs_run(off), jobs_run(on)
    added = {rule: n for rule, n in on_jobs.items() if off_jobs.get(rule) != n}
    assert added == {"distill_data": 1, "distill_train": 2, "evaluate_distilled": 2}
    bad = dry_run(tmp_path / "bad", tiny_config(tiny_model_dir, distill=DISTILL | {"lora": {"target_modules": ["c_attn"]}}))
    said = bad.stdout + bad.stderr
    assert bad.returncode != 0
    assert "distill.lora.target_modules" in said and "no linear module named ['c_attn']" in said


def test_a_search_with_no_correct_answer_stops_at_distill_data_naming_the_round_and_the_fixes(tmp_path, tiny_model_dir):
    workdir = tmp_path / "run"
    problems = unguessable_gsm8k(tmp_path / "problems")
    proc = run_workflow(workdir, tiny_config(tiny_model_dir, distill=DISTILL, gsm8k=problems), check=False)
    assert proc.returncode != 0, "the run should stop at distill_data"
    log = "".join(p.read_text() for p in (workdir / "logs" / "distill_data").rglob("*.log"))
    assert "distill round 1: the top 0.5 list (4 members) has no correct completion" in log, failure_report(workdir, proc)
    assert "population.n_seeds" in log and "population.sigmas" in log
    assert not list((workdir / "results").glob("distill/**/*.jsonl"))  # nothing half-written
    assert list((workdir / "results" / "rank").rglob("topk.json"))  # the search ran before it
