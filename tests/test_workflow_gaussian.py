"""A reduced run with perturbation.noise: gaussian, for real through Snakemake: its record names the
noise, its export is the Gaussian member, and asking its ensemble gives the run's own answers (so
the engine stages, the export and ask all perturbed with the same noise). The run is queued in the
background from the session's start (tests/support/task_runs.py; tests/conftest.py)."""
import json

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from tests.support.workflow import jobs_run, read_record

pytestmark = pytest.mark.slow


def test_a_gaussian_run_records_exports_and_asks_with_its_noise(gaussian_run_started, tiny_model_dir):
    from randopt.kernels.noise_ref import reconstruct_reference_
    from randopt.result.finished_run import ask, default_model_dir

    tmp_path, proc = gaussian_run_started.result()
    assert jobs_run(proc)["evaluate_shard"] == 1 and jobs_run(proc)["export_member"] == 1
    record = read_record(tmp_path)
    assert record["noise"] == {"kind": "gaussian", "definition": "kernels/noise_ref.py gaussian v2"}
    assert record["config"]["perturbation"] == {"noise": "gaussian", "switch": "reconstruct"}
    assert record["perturbation"] == {"switch": "reconstruct", "drift": None}

    best = record["topk"][0]["members"][0]
    (member_dir,) = (tmp_path / "results" / "export").rglob("rank1")
    member = json.loads((member_dir / "randopt_member.json").read_text())
    assert member["noise"] == "kernels/noise_ref.py gaussian v2"
    assert (member["seed"], member["sigma"]) == (best["seed"], best["sigma"])
    base = load_file(str(tiny_model_dir / "model.safetensors"))
    for name, tensor in load_file(str(member_dir / "model.safetensors")).items():
        want = torch.empty_like(base[name])
        reconstruct_reference_(want, base[name], best["seed"], best["sigma"], name, "gaussian")
        assert torch.equal(tensor, want), name

    # ask rebuilds each member from the record's noise: its completions are evaluate_members' own
    record_path = tmp_path / "results" / "record.json"
    (test_path,) = sorted((tmp_path / "data").rglob("test.jsonl"))
    problems = [json.loads(line) for line in test_path.read_text().splitlines()]
    results = ask(record_path, 0.5, [p["question"] for p in problems], default_model_dir(record_path))
    (answers,) = (tmp_path / "results" / "members").rglob("answers.parquet")
    table = pd.read_parquet(answers)
    rows = {(r.seed, r.sigma, r.problem_id): r.completion for r in table.itertuples()}
    for problem, result in zip(problems, results):
        assert [m["completion"] for m in result["members"]] == [rows[(best["seed"], best["sigma"], problem["id"])]]
