"""profiles/slurm on a real (one-node, throwaway) SLURM cluster started by the test.

The tiny workflow runs to the end through the SLURM executor plugin and must write the same record as
a local run; every heavy job must have gone through sbatch (the controller knows it, by rule); the small
stages must have stayed local; and a GPU stage must be submitted with a GPU request of
tensor_parallel_size GPUs of resources.gpu_model, which the node's fake GPUs (GRES) let SLURM schedule.
The cluster (munged, slurmctld, slurmd; tests/support/slurm_cluster.py) is installed with apt-get when
missing, and stopped by pid at teardown, also when a test fails. The runs, which mostly wait on the
cluster, are made in the background from the session's start on (fixture slurm_runs, tests/conftest.py;
tests/support/slurm_runs.py); the tests here wait for them and check them."""
from __future__ import annotations

import json
import re
import subprocess
from collections import Counter

import pandas as pd
import pytest
import yaml

from randopt.keys import run_keys
from tests.conftest import REPO, skip_unless_ci
from tests.support.slurm_cluster import GPU_TYPE, SlurmUnavailable
from tests.support.slurm_runs import first_shard
from tests.support.workflow import (CLUSTER_RESOURCES, HEAVY_STAGES, SNAKEMAKE, effective_config, read_record,
                                    tiny_config)

HEAVY_JOBS = {"prepare_model": 1, "evaluate_shard": 4, "evaluate_members": 1, "score_bpb": 1}
LOCAL_RULES = ["freeze_problems", "fetch_fineweb", "rank", "vote", "record", "figures", "last_record"]
# What may differ between two runs of one config: when and how fast it ran, and on what.
VOLATILE = ["created_utc", "timings_s", "throughput", "hardware"]
# Small jobs: two fit side by side on the test node; threads (2) equal the local run's --cores 2.
RESOURCES = CLUSTER_RESOURCES
assert set(HEAVY_JOBS) == set(HEAVY_STAGES)


def submitted(proc: subprocess.CompletedProcess) -> list[str]:
    """SLURM job ids the executor reports for its sbatch submissions."""
    return re.findall(r"has been submitted with SLURM jobid (\d+)", proc.stdout + proc.stderr)


def rule_of(job: dict) -> str:
    """The rule of a job, from the comment the executor gives it (rule_<name>[_wildcards_...])."""
    return re.fullmatch(r"rule_(\w+?)(_wildcards_.*)?", job["Comment"]).group(1)


def comparable(record: dict) -> dict:
    """The record less what says where and when it ran; the engine count's reason names the run's
    kind (a cluster job runs one engine, a local run decides)."""
    kept = {k: v for k, v in record.items() if k not in VOLATILE}
    return kept | {"engine": {k: v for k, v in kept["engine"].items() if k != "engines_resolved"}}


@pytest.fixture(scope="module")
def cluster(slurm_runs):
    try:
        return slurm_runs.cluster_ready()
    except SlurmUnavailable as err:
        skip_unless_ci(f"no SLURM cluster on this machine: {err}")


@pytest.fixture(scope="module")
def runs(cluster, slurm_runs, tiny_run):
    """The same config twice: locally (--cores 2; the session's finished tiny run, tests/conftest.py,
    whose config has these resources) and through SLURM (slurm_runs.main), side by side."""
    config = tiny_run.config
    assert config["resources"] == RESOURCES and slurm_runs.config == config
    slurm_runs.result()
    return {"local": tiny_run.workdir, "slurm": slurm_runs.workdir, "proc": slurm_runs.main, "config": config,
            "gpu": slurm_runs.gpu, "gpu_config": slurm_runs.gpu_config, "engines": slurm_runs.engines}


@pytest.mark.slurm
@pytest.mark.slow
def test_slurm_run_writes_the_local_record(runs):
    local, on_slurm = read_record(runs["local"]), read_record(runs["slurm"])
    assert comparable(on_slurm) == comparable(local)
    assert set(on_slurm["timings_s"]) == set(local["timings_s"])


@pytest.mark.slurm
@pytest.mark.slow
def test_heavy_jobs_went_through_sbatch_and_small_ones_stayed_local(runs, cluster):
    ids = submitted(runs["proc"])
    assert len(ids) == sum(HEAVY_JOBS.values()), runs["proc"].stderr[-4000:]
    assert set(ids) <= set(cluster.submitted_job_ids())  # the controller accepted each of them
    jobs = [cluster.show_job(i) for i in ids]
    assert Counter(rule_of(j) for j in jobs) == HEAVY_JOBS  # no local rule was submitted
    for job in jobs:
        assert job["JobState"] == "COMPLETED", job
        assert job["NumCPUs"] == "2"  # resources.cpus_per_task, also the threads of the job
        assert "gpu" not in job.get("TresPerJob", "") + job.get("TRES", "")  # the CPU engine asks for no GPU
    out = runs["proc"].stdout + runs["proc"].stderr
    for rule in LOCAL_RULES:
        assert f"localrule {rule}:" in out, rule


@pytest.mark.slurm
@pytest.mark.slow
def test_gpu_stage_asks_for_tensor_parallel_gpus(runs, cluster):
    """One shard on a vLLM config with tensor_parallel_size 2: submitted with --gpus=<model>:2, and SLURM
    schedules it on the node's fake GPUs. (The job itself then fails: no vLLM and no GPU here.)"""
    # The run (tests/support/slurm_runs.py): --retries 0 --verbose, the shard its one target, in the SLURM
    # run's dir after that run.
    config, proc = runs["gpu_config"], runs["gpu"]
    assert config == runs["config"] | {"engine": {"kind": "vllm", "device": "cuda", "batch_size": 8,
                                                  "tensor_parallel_size": 2},
                                       "resources": RESOURCES | {"gpu_model": GPU_TYPE}}
    shard = f"results/shards/{run_keys(effective_config(config))['eval']}/sigma=0.01/seeds_0000-0001.parquet"
    assert proc.args[-1] == shard and "--retries" in proc.args and "--verbose" in proc.args
    out = proc.stdout + proc.stderr
    calls = re.findall(r"sbatch call: (sbatch .*)", out)
    ids = submitted(proc)
    assert len(calls) == 1 and len(ids) == 1, out[-6000:]  # only the shard: the model is already prepared
    assert f"--gpus={GPU_TYPE}:2" in calls[0] and "--cpus-per-gpu=1" in calls[0] and "--nodes=1" in calls[0], calls[0]
    assert "--cpus-per-task" not in calls[0], calls[0]
    job = cluster.show_job(ids[0])
    assert rule_of(job) == "evaluate_shard"
    assert f"gres:gpu:{GPU_TYPE}:2" in job["TresPerJob"], job
    assert job["JobState"] not in ("PENDING", "CANCELLED"), job  # scheduled and started on the fake GPUs
    assert job["NodeList"] == cluster.node and job["NumCPUs"] == "2", job  # cpus_per_gpu x 2 GPUs


@pytest.mark.slurm
@pytest.mark.slow
def test_a_cluster_job_runs_engines_side_by_side_inside_it(runs, cluster):
    """engine.engines_per_gpu 2 on a cluster: the shard's one job starts two engines of its own, each answers
    one of its two seeds, and the shard is the one the main run's single engine wrote
    (tests/support/slurm_runs.py, the engines run)."""
    proc = runs["engines"]
    assert proc.returncode == 0, proc.stderr[-6000:]
    ids = submitted(proc)
    assert len(ids) == 1, proc.stderr[-4000:]
    job = cluster.show_job(ids[0])
    assert rule_of(job) == "evaluate_shard" and job["JobState"] == "COMPLETED" and job["NumCPUs"] == "2", job
    shard = runs["slurm"] / first_shard(runs["config"])
    volatile = ["switch_s", "generate_s"]
    pd.testing.assert_frame_equal(pd.read_parquet(shard).drop(columns=volatile),
                                  pd.read_parquet(runs["slurm"] / "engines_baseline.parquet").drop(columns=volatile))
    timings = json.loads(shard.with_name(shard.name.replace(".parquet", ".timings.json")).read_text())
    assert [e["members_evaluated"] for e in timings["engines_in_job"]] == [1, 1], timings
    log = (runs["slurm"] / first_shard(runs["config"]).replace("results/shards/", "logs/evaluate_shard/", 1)
           .replace(".parquet", ".log")).read_text()
    assert "the job's 2 engines: servers of its own" in log and "stopped 2 of the job's 2 engines" in log


@pytest.mark.slow
def test_dry_run_resources_follow_the_engine(tiny_model_dir, tmp_path):
    """Without a cluster: the resources each job would ask for, as Snakemake's dry run lists them."""
    listed: dict[str, str] = {}  # one dry run per config, read for each of its rules

    def resources_of(config, rule):
        text = yaml.safe_dump(config)
        if text not in listed:
            (tmp_path / "c.yaml").write_text(text)
            proc = subprocess.run([*SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--directory", str(tmp_path),
                                   "--configfile", str(tmp_path / "c.yaml"), "-n", "--forceall"],
                                  capture_output=True, text=True)
            assert proc.returncode == 0, proc.stderr[-3000:]
            listed[text] = proc.stdout
        block = listed[text].split(f"rule {rule}:", 1)[1].split("\n\n", 1)[0]
        line = next(l for l in block.splitlines() if l.strip().startswith("resources:"))
        return dict(kv.split("=", 1) for kv in line.split(":", 1)[1].strip().split(", "))

    cpu = tiny_config(tiny_model_dir, resources=RESOURCES)
    res = resources_of(cpu, "evaluate_shard")
    assert res["gpu"] == "0" and res["cpus_per_task"] == "2" and "gpu_model" not in res and "cpus_per_gpu" not in res
    assert res["mem_mb"] == "1000" and res["runtime"] == "10"
    vllm = cpu | {"engine": {"kind": "vllm", "device": "cuda", "tensor_parallel_size": 4},
                  "resources": RESOURCES | {"gpu_model": "h100"}}
    for rule in ("evaluate_shard", "evaluate_members", "score_bpb"):
        res = resources_of(vllm, rule)
        assert (res["gpu"], res["gpu_model"], res["cpus_per_gpu"], res["nodes"]) == ("4", "h100", "1", "1"), res
        assert "cpus_per_task" not in res
    assert resources_of(vllm, "prepare_model")["gpu"] == "0"  # a CPU job whatever the engine
