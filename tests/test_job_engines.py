"""Engines side by side inside one job (randopt/runtime/job_engines.py; evaluate_shard --engines-in-job): the
job's own servers answer its seeds between them, the shard is what one engine writes, and nothing of them
outlives the job.

The jobs are processes of their own in folders of their own (~40 s of one core in all): job_engine_runs
runs them where the session queues it (fixture job_engines_started, tests/conftest.py: in the background,
beside other tests), and notes what must be seen the moment a job ends (its servers' pids, its folder);
the tests check what it saw."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
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


def shard(tmp_path, model_dir, name: str, *flags: str, options=None, env=None) -> subprocess.CompletedProcess:
    out = tmp_path / name
    return subprocess.run(
        [sys.executable, "-m", "randopt.stages.evaluate_shard", "--model-dir", str(model_dir), "--engine", "torch",
         "--engine-options-file", block(tmp_path, options or {"device": "cpu", "batch_size": 4}), "--threads", "2",
         "--decode-file", block(tmp_path, {"max_tokens": 6}), "--train", str(train_file(tmp_path)), "--sigma", "0.05",
         "--first-seed", "0", "--last-seed", "5", "--cache-dir", str(out / "cache"), "--out", str(out / "s.parquet"),
         "--timings", str(out / "t.json"), *flags],
        cwd=REPO, capture_output=True, text=True, timeout=600, env=env)


def race(root: Path, model_dir: Path, name: str, *flags: str, env=None) -> subprocess.CompletedProcess:
    """race_slice on the racing config's chunk 0 of round 0 (its members: several sigmas), in root/name."""
    from randopt.selection.plan import RacePlan
    from tests.support.racing_runs import RACING, config_with
    from tests.support.workflow import effective_config
    plan = RacePlan.from_config(effective_config(config_with(model_dir, RACING)))
    train = root / "train24.jsonl"
    train.write_text("".join(json.dumps({"id": f"train-{i}", "question": f"{i} + 1?", "answer": f"#### {i + 1}"}) + "\n"
                             for i in range(plan.n_problems)))
    out = root / name
    return subprocess.run(
        [sys.executable, "-m", "randopt.stages.race_slice", "--model-dir", str(model_dir), "--engine", "torch",
         "--engine-options-file", block(root, {"device": "cpu", "batch_size": plan.answer_block}),
         "--threads", "2", "--decode-file", block(root, {"max_tokens": 4}), "--train", str(train),
         "--plan-file", block(root, json.loads(plan.to_json())),
         "--round", "0", "--chunk", "0", "--cache-dir", str(out / "cache"), "--out", str(out / "t.parquet"),
         "--timings", str(out / "t.json"), *flags], cwd=REPO, capture_output=True, text=True, timeout=600, env=env)


def left_behind(proc: subprocess.CompletedProcess) -> dict:
    """What of a job's own servers is still there the moment it has ended: the pids it started, which of them
    still run, and whether its servers' folder is still there."""
    pids = [int(p) for p in re.findall(r"started pid (\d+) on cpu\.e[01]of2", proc.stderr)]
    folder = re.search(r"servers of its own in (\S+)", proc.stderr)
    return {"pids": pids, "alive": [pid for pid in pids if processes.alive(pid)],
            "folder": folder and folder.group(1), "folder_exists": bool(folder) and Path(folder.group(1)).exists()}


def job_engine_runs(root: Path, model_dir: Path, env: dict) -> dict:
    """Every job the tests below read, each in root/<its name>, one after another: name -> (the process, what
    it left behind the moment it ended). env: the session's environment as it began (a test's monkeypatch
    in the foreground must not reach these processes)."""
    runs = {}
    for folder in ("shards", "race"):
        (root / folder).mkdir()
    for name, flags, options in [("alone", (), None), ("two", ("--engines-in-job", "2"), None),
                                 ("bad", ("--engines-in-job", "2", "--keep-loaded-s", "60"), None),
                                 ("zero", ("--engines-in-job", "0"), None),
                                 ("delta", ("--engines-in-job", "2"), {"device": "cpu", "batch_size": 4, "switch": "delta"})]:
        proc = shard(root / "shards", model_dir, name, *flags, options=options, env=env)
        runs[name] = (proc, left_behind(proc))
    for name, flags in [("alone", ()), ("two", ("--engines-in-job", "2"))]:
        proc = race(root / "race", model_dir, name, *flags, env=env)
        runs[f"race-{name}"] = (proc, left_behind(proc))
    runs["root"] = root
    return runs


@pytest.fixture(scope="module")
def runs(job_engines_started):
    return job_engines_started.result()


def test_two_engines_inside_a_job_answer_its_seeds_as_one_engine_does(runs):
    (alone, _), (two, left) = runs["alone"], runs["two"]
    shards = runs["root"] / "shards"
    assert alone.returncode == 0, alone.stderr[-3000:]
    assert two.returncode == 0, two.stderr[-3000:]
    volatile = ["switch_s", "generate_s"]
    a = pd.read_parquet(shards / "alone" / "s.parquet").drop(columns=volatile)
    b = pd.read_parquet(shards / "two" / "s.parquet").drop(columns=volatile)
    pd.testing.assert_frame_equal(a, b)   # every answer, in seed order, whichever engine gave it
    timings = json.loads((shards / "two" / "t.json").read_text())
    per_engine = timings["engines_in_job"]
    assert len(per_engine) == 2 and sum(e["members_evaluated"] for e in per_engine) == 6
    assert all(e["members_evaluated"] > 0 for e in per_engine), per_engine   # both answered
    assert sorted(map(tuple, timings["members_evaluated"])) == [(s, 0.05) for s in range(6)]
    # the job's servers: two slots of its device, built one after another, and gone with the job
    assert len(left["pids"]) == 2, two.stderr[-3000:]
    assert not left["alive"]
    assert "stopped 2 of the job's 2 engines" in two.stderr
    assert left["folder"] and not left["folder_exists"]


def test_engines_inside_a_job_refuse_shared_resident_engines_and_keep_one_for_the_delta_switch(runs):
    (bad, _), (zero, _), (delta, _) = runs["bad"], runs["zero"], runs["delta"]
    assert bad.returncode == 2 and "--engines-in-job runs a job's own engines: not with --keep-loaded-s" in bad.stderr
    assert zero.returncode == 2 and "--engines-in-job must be >= 1, got 0" in zero.stderr
    # the delta switch walks from member to member: split over engines, its weights would depend on N
    assert delta.returncode == 0, delta.stderr[-3000:]
    assert "one engine in this job, not 2: perturbation.switch delta" in delta.stderr
    assert "engines_in_job" not in json.loads((runs["root"] / "shards" / "delta" / "t.json").read_text())


def test_a_racing_slice_with_two_engines_inside_its_job_is_the_one_engine_slice(runs):
    """race_slice answers its chunk's members (several sigmas) between the job's engines, in members' order."""
    def slice_of(name: str) -> pd.DataFrame:
        proc, _ = runs[f"race-{name}"]
        assert proc.returncode == 0, proc.stderr[-3000:]
        return pd.read_parquet(runs["root"] / "race" / name / "t.parquet").drop(columns=["switch_s", "generate_s"])

    pd.testing.assert_frame_equal(slice_of("alone"), slice_of("two"))
    per_engine = json.loads((runs["root"] / "race" / "two" / "t.json").read_text())["engines_in_job"]
    assert len(per_engine) == 2 and all(e["members_evaluated"] > 0 for e in per_engine), per_engine
