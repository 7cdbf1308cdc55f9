"""Engines side by side inside one job (randopt/runtime/job_engines.py; evaluate_shard --engines-in-job): the
job's own servers answer its seeds between them, the shard is what one engine writes, and nothing of them
outlives the job."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
from randopt.runtime.resident import processes
from tests.conftest import REPO
from tests.support.blocks import block

PROBLEMS = [("2 + 3?", "5"), ("Tom has 4 apples and eats one. How many are left?", "3"), ("7 - 2?", "5"),
            ("Half of 10?", "5")]


def train_file(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps({"id": f"train-{i}", "question": q, "answer": f"{a}\n#### {a}"}) + "\n"
                            for i, (q, a) in enumerate(PROBLEMS)))
    return path


def shard(tmp_path, model_dir, name: str, *flags: str, options=None) -> subprocess.CompletedProcess:
    out = tmp_path / name
    return subprocess.run(
        [sys.executable, "-m", "randopt.stages.evaluate_shard", "--model-dir", str(model_dir), "--engine", "torch",
         "--engine-options-file", block(tmp_path, options or {"device": "cpu", "batch_size": 4}), "--threads", "2",
         "--decode-file", block(tmp_path, {"max_tokens": 6}), "--train", str(train_file(tmp_path)), "--sigma", "0.05",
         "--first-seed", "0", "--last-seed", "5", "--cache-dir", str(out / "cache"), "--out", str(out / "s.parquet"),
         "--timings", str(out / "t.json"), *flags],
        cwd=REPO, capture_output=True, text=True, timeout=600)


def test_two_engines_inside_a_job_answer_its_seeds_as_one_engine_does(tmp_path, tiny_model_dir):
    alone, two = shard(tmp_path, tiny_model_dir, "alone"), shard(tmp_path, tiny_model_dir, "two", "--engines-in-job", "2")
    assert alone.returncode == 0, alone.stderr[-3000:]
    assert two.returncode == 0, two.stderr[-3000:]
    volatile = ["switch_s", "generate_s"]
    a = pd.read_parquet(tmp_path / "alone" / "s.parquet").drop(columns=volatile)
    b = pd.read_parquet(tmp_path / "two" / "s.parquet").drop(columns=volatile)
    pd.testing.assert_frame_equal(a, b)   # every answer, in seed order, whichever engine gave it
    timings = json.loads((tmp_path / "two" / "t.json").read_text())
    per_engine = timings["engines_in_job"]
    assert len(per_engine) == 2 and sum(e["members_evaluated"] for e in per_engine) == 6
    assert all(e["members_evaluated"] > 0 for e in per_engine), per_engine   # both answered
    assert sorted(map(tuple, timings["members_evaluated"])) == [(s, 0.05) for s in range(6)]
    # the job's servers: two slots of its device, built one after another, and gone with the job
    pids = [int(p) for p in re.findall(r"started pid (\d+) on cpu\.e[01]of2", two.stderr)]
    assert len(pids) == 2, two.stderr[-3000:]
    assert not any(processes.alive(pid) for pid in pids)
    assert "stopped 2 of the job's 2 engines" in two.stderr
    folder = re.search(r"servers of its own in (\S+)", two.stderr).group(1)
    assert not Path(folder).exists()


def test_engines_inside_a_job_refuse_shared_resident_engines_and_keep_one_for_the_delta_switch(tmp_path,
                                                                                              tiny_model_dir):
    bad = shard(tmp_path, tiny_model_dir, "bad", "--engines-in-job", "2", "--keep-loaded-s", "60")
    assert bad.returncode == 2 and "--engines-in-job runs a job's own engines: not with --keep-loaded-s" in bad.stderr
    zero = shard(tmp_path, tiny_model_dir, "zero", "--engines-in-job", "0")
    assert zero.returncode == 2 and "--engines-in-job must be >= 1, got 0" in zero.stderr
    # the delta switch walks from member to member: split over engines, its weights would depend on N
    delta = shard(tmp_path, tiny_model_dir, "delta", "--engines-in-job", "2",
                  options={"device": "cpu", "batch_size": 4, "switch": "delta"})
    assert delta.returncode == 0, delta.stderr[-3000:]
    assert "one engine in this job, not 2: perturbation.switch delta" in delta.stderr
    assert "engines_in_job" not in json.loads((tmp_path / "delta" / "t.json").read_text())



def test_a_racing_slice_with_two_engines_inside_its_job_is_the_one_engine_slice(tmp_path, tiny_model_dir):
    """race_slice answers its chunk's members (several sigmas) between the job's engines, in members' order."""
    from randopt.selection.plan import RacePlan
    from tests.support.racing_runs import RACING, config_with
    from tests.support.workflow import effective_config
    plan = RacePlan.from_config(effective_config(config_with(tiny_model_dir, RACING)))
    train = tmp_path / "train24.jsonl"
    train.write_text("".join(json.dumps({"id": f"train-{i}", "question": f"{i} + 1?", "answer": f"#### {i + 1}"}) + "\n"
                             for i in range(plan.n_problems)))

    def race(name: str, *flags: str) -> pd.DataFrame:
        out = tmp_path / name
        proc = subprocess.run(
            [sys.executable, "-m", "randopt.stages.race_slice", "--model-dir", str(tiny_model_dir), "--engine", "torch",
             "--engine-options-file", block(tmp_path, {"device": "cpu", "batch_size": plan.answer_block}),
             "--threads", "2", "--decode-file", block(tmp_path, {"max_tokens": 4}), "--train", str(train),
             "--plan-file", block(tmp_path, json.loads(plan.to_json())),
             "--round", "0", "--chunk", "0", "--cache-dir", str(out / "cache"), "--out", str(out / "t.parquet"),
             "--timings", str(out / "t.json"), *flags], cwd=REPO, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return pd.read_parquet(out / "t.parquet").drop(columns=["switch_s", "generate_s"])

    pd.testing.assert_frame_equal(race("alone"), race("two", "--engines-in-job", "2"))
    per_engine = json.loads((tmp_path / "two" / "t.json").read_text())["engines_in_job"]
    assert len(per_engine) == 2 and all(e["members_evaluated"] > 0 for e in per_engine), per_engine

