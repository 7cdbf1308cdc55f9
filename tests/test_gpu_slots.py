"""GPU slots on one host (randopt/runtime/gpu_slots.py) and how a local run with --resources gpu=N uses them.

Claims are made by real processes (`python -m randopt.runtime.gpu_slots SIZE TOTAL LOCK_DIR TIMEOUT`, which
claims, prints its GPU ids and holds them until its stdin closes) on a lock directory with a fake GPU
count: no GPU is needed. The workflow part is a dry run of the tiny config (`snakemake -n -p`)."""
from __future__ import annotations

import json
import re
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from randopt.runtime import gpu_slots
from randopt.runtime.gpu_slots import GpuSlotError, claim, groups
from tests.conftest import REPO
from tests.support.blocks import block, flag_block
from tests.support.workflow import SNAKEMAKE, tiny_config


def env_without_cvd(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env | extra


class Claimer:
    """One process claiming `size` of `total` GPUs; it holds them until stop() (or a kill)."""

    def __init__(self, lock_dir: Path, size: int, total: int, timeout: float = 30.0, env: dict | None = None):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "randopt.runtime.gpu_slots", str(size), str(total), str(lock_dir), str(timeout)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=env or env_without_cvd(), cwd=REPO)

    def ids(self) -> str:
        """The claimed ids as printed ("0,1", or "none"); fails if the claim failed."""
        line = self.proc.stdout.readline().strip()
        assert line, f"claimer printed nothing: rc {self.proc.wait(10)}, {self.proc.stderr.read()}"
        return line

    def waits(self) -> str:
        """Block until the claimer reports on stderr that every group is taken and it is waiting (the
        event itself, not a sleep); return that line. Fails if it ends or prints anything else first."""
        line = self.proc.stderr.readline()
        assert "are taken" in line and "waiting up to" in line, \
            f"claimer did not report waiting: {line!r}, rc {self.proc.poll()}, {self.proc.stderr.read()}"
        return line

    def failure(self) -> tuple[int, str]:
        self.proc.stdin.close()
        rc = self.proc.wait(60)
        return rc, self.proc.stderr.read()



@pytest.fixture
def claimers():
    started: list[Claimer] = []

    def start(*args, **kwargs) -> Claimer:
        started.append(Claimer(*args, **kwargs))
        return started[-1]

    yield start
    for c in started:
        if c.proc.poll() is None:
            c.proc.kill()
        c.proc.wait(10)
        for stream in (c.proc.stdin, c.proc.stdout, c.proc.stderr):
            stream.close()


def test_two_single_gpu_claimers_get_disjoint_gpus(claimers, tmp_path):
    a, b = claimers(tmp_path, 1, 2), claimers(tmp_path, 1, 2)
    ids = {a.ids(), b.ids()}
    assert ids == {"0", "1"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpu0.lock", "gpu1.lock"]


def test_tensor_parallel_groups_are_aligned(claimers, tmp_path):
    a, b = claimers(tmp_path, 2, 4), claimers(tmp_path, 2, 4)
    assert {a.ids(), b.ids()} == {"0,1", "2,3"}
    assert groups(2, 4) == [[0, 1], [2, 3]] and groups(4, 8) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert groups(1, 3) == [[0], [1], [2]]


def test_a_group_with_one_taken_gpu_is_not_claimed(claimers, tmp_path):
    """A tp=1 job on GPU 0 (of 4) leaves {2,3} as the only free aligned pair, never {1,2}."""
    one = claimers(tmp_path, 1, 4)
    assert one.ids() == "0"
    assert claimers(tmp_path, 2, 4).ids() == "2,3"
    assert claimers(tmp_path, 1, 4).ids() == "1"


def test_no_free_group_waits_then_times_out_clearly(claimers, tmp_path):
    a, b = claimers(tmp_path, 1, 2), claimers(tmp_path, 1, 2)
    a.ids(), b.ids()
    third = claimers(tmp_path, 1, 2, timeout=1.5)
    assert "all 2 groups of 1 of 2 GPUs are taken" in third.waits()  # it queued instead of failing at once
    rc, err = third.failure()
    assert rc == 2, (rc, err)
    assert err.startswith("error: no free group of 1 of 2 GPUs") and "after 1.5 s" in err, err
    assert f"pid {a.proc.pid}" in err and f"pid {b.proc.pid}" in err, err  # who holds them


def test_a_killed_holder_frees_its_gpus(claimers, tmp_path):
    holder = claimers(tmp_path, 2, 2)
    assert holder.ids() == "0,1"
    waiter = claimers(tmp_path, 1, 2, timeout=600)
    waiter.waits()  # both GPUs are taken: it says so and waits
    os.kill(holder.proc.pid, signal.SIGKILL)
    holder.proc.wait(10)
    assert waiter.ids() == "0"  # the kernel dropped the dead holder's locks
    assert claimers(tmp_path, 1, 2, timeout=5).ids() == "1"


@pytest.mark.parametrize("size, total, message", [
    (3, 2, "a job needs 3 GPUs (tensor_parallel_size) but only 2 are given"),
    (2, 3, "3 GPUs do not divide into groups of 2"),
    (4, 6, "give a multiple of 4 (--resources gpu=4)"),
    (0, 2, "at least 1"),
    (1, 0, "at least 1"),
])
def test_bad_sizes_are_clear_errors(size, total, message, tmp_path):
    with pytest.raises(GpuSlotError, match=message.replace("(", r"\(").replace(")", r"\)")):
        claim(size, total, tmp_path, env={})
    assert not any(tmp_path.iterdir())
    proc = subprocess.run([sys.executable, "-m", "randopt.runtime.gpu_slots", str(size), str(total), str(tmp_path), "1"],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env_without_cvd(), cwd=REPO)
    assert proc.returncode == 2 and proc.stderr.startswith("error: ") and message in proc.stderr, proc.stderr


def test_cuda_visible_devices_already_set_claims_nothing(claimers, tmp_path):
    assert claim(1, 2, tmp_path / "locks", env={"CUDA_VISIBLE_DEVICES": "3"}) is None
    assert not (tmp_path / "locks").exists()
    assert claimers(tmp_path / "locks", 1, 2, env=env_without_cvd(CUDA_VISIBLE_DEVICES="0,1")).ids() == "none"
    assert not (tmp_path / "locks").exists()


STAGE = """
import json, logging, os, sys
import randopt.runtime.engine_args as engine_args
import randopt.stages.evaluate_shard as stage
logging.basicConfig(level=logging.INFO)
seen = {}
def fake_engine(kind, model_dir, **options):
    seen.update(kind=kind, options=options, cvd=os.environ.get("CUDA_VISIBLE_DEVICES"),
                order=os.environ.get("CUDA_DEVICE_ORDER"))
engine_args.make_engine = fake_engine
engine_args.engine_makers_from_args(stage.parse_args(sys.argv[1:]))[0]()
print(json.dumps(seen))
"""


@pytest.mark.parametrize("engine, options, env, expected", [
    ("vllm", {"device": "cuda", "tensor_parallel_size": 2}, {}, "0,1"),
    ("torch", {"device": "cuda"}, {}, "0"),
    ("torch", {"device": "cpu"}, {}, None),                              # a CPU engine claims nothing
    ("vllm", {"device": "cuda", "tensor_parallel_size": 2}, {"CUDA_VISIBLE_DEVICES": "5,6"}, "5,6"),  # SLURM's
])
def test_stage_cli_claims_before_the_engine(engine, options, env, expected, tmp_path):
    """The stage CLIs' --gpu-slots: the engine is created seeing only the claimed GPUs."""
    locks = tmp_path / "locks"
    args = ["--model-dir", "m", "--engine", engine, "--engine-options-file", block(tmp_path, options), "--decode-file", block(tmp_path, {}),
            "--train", "t", "--sigma", "0.1", "--first-seed", "0", "--last-seed", "0", "--cache-dir", "c", "--out", "o",
            "--timings", "t", "--gpu-slots", "4", "--gpu-lock-dir", str(locks)]
    proc = subprocess.run([sys.executable, "-c", STAGE, *args], capture_output=True, text=True,
                          env=env_without_cvd(**env), cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["kind"] == engine and seen["cvd"] == expected
    assert seen["options"] == options  # the engine's options (and so its numerics) are untouched
    claimed = expected is not None and not env
    assert locks.exists() == claimed
    if claimed:
        assert seen["order"] == "PCI_BUS_ID" and f"GPU slot: GPUs [{expected.replace(',', ', ')}] of 4" in proc.stderr


def test_release_gives_gpus_back(tmp_path):
    assert claim(1, 1, tmp_path, env={}) == [0]
    with pytest.raises(GpuSlotError):
        claim(1, 1, tmp_path, env={}, timeout=0)  # flock is per open file: a second claim here fails too
    gpu_slots.release()
    assert claim(1, 1, tmp_path, env={}, timeout=0) == [0]
    gpu_slots.release()


# --- the workflow: a dry run of the tiny config ------------------------------------------------------

def dry_run(tmp_path: Path, config: dict, *extra: str) -> dict[str, list[tuple[str, str]]]:
    """rule -> [(threads, shell command)] of every job `snakemake -n -p --cores 4` would run."""
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config))
    proc = subprocess.run([*SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--directory", str(tmp_path / "w"),
                           "--configfile", str(tmp_path / "c.yaml"), "--cores", "4", "-n", "-p", "--forceall", *extra],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs: dict[str, list[tuple[str, str]]] = {}
    for block in proc.stdout.split("\nrule ")[1:]:
        rule = block.split(":", 1)[0]
        threads = next((l.split(":", 1)[1].strip() for l in block.splitlines() if l.strip().startswith("threads:")), "1")
        command = next(l for l in block.splitlines() if l.startswith("Shell command:"))
        jobs.setdefault(rule, []).append((threads, command))
    return {rule: sorted(runs) for rule, runs in jobs.items()}


GPU_RULES = ("evaluate_shard", "evaluate_members_part", "evaluate_members", "score_bpb")


@pytest.mark.slow
def test_dry_run_local_gpu_slots(tiny_model_dir, tmp_path):
    vllm = tiny_config(tiny_model_dir, engine={"kind": "vllm", "device": "cuda", "tensor_parallel_size": 1})
    jobs = dry_run(tmp_path, vllm, "--resources", "gpu=2")
    assert len(jobs["evaluate_shard"]) == 4
    assert len(jobs["evaluate_members_part"]) == 2  # two slots: evaluate_members' work is dealt over both
    for rule in GPU_RULES:
        for threads, command in jobs[rule]:
            assert threads == "2", (rule, threads)  # 4 cores x 1 GPU / 2 GPUs: two jobs side by side
            # its GPUs among 2, and the device's resident engine (engine.keep_loaded_s, default 300)
            assert (" --gpu-slots 2 --gpu-lock-dir .snakemake/gpu-locks --keep-loaded-s 300 --resident-dir "
                    ".snakemake/engines --threads 2 ") in command, command
    assert jobs["prepare_model"][0][0] == "4"   # a CPU stage keeps every core
    assert all("--gpu-slots" not in c for rule in jobs for _, c in jobs[rule] if rule not in GPU_RULES)

    plain = dry_run(tmp_path, vllm)  # no --resources gpu=N: one GPU job at a time, as before
    assert "evaluate_members_part" not in plain  # one slot: evaluate_members does all its work itself
    for rule in GPU_RULES:
        assert all(t == "4" and "--gpu-slots" not in c for t, c in plain.get(rule, [])), plain.get(rule)
    # The same outputs either way (the flags are outside params and keys): same commands but the flags, and
    # evaluate_members' parts (which fill the same cache it reads).
    strip = lambda jobs_: sorted(re.sub(r" --parts \S+ \S+", "", c)
                                 .replace(" --gpu-slots 2 --gpu-lock-dir .snakemake/gpu-locks", "")
                                 .replace(" --keep-loaded-s 300 --resident-dir .snakemake/engines", "")
                                 .replace("--threads 2", "--threads 4")
                                 for r in GPU_RULES if r != "evaluate_members_part" for _, c in jobs_[r])
    assert strip(jobs) == strip(plain)
    # keep_loaded_s 0: each job loads its own engine; only the flag goes (no key, no param changes). In the same
    # dry run (one DAG build fewer), engine.worker_process reaches every engine's options and changes nothing else.
    own = dry_run(tmp_path, dict(vllm, engine=dict(vllm["engine"], keep_loaded_s=0, worker_process=True)))
    options = lambda command: flag_block(command, "--engine-options-file", tmp_path / "w")  # noqa: E731
    assert all("--keep-loaded-s" not in c and options(c)["worker_process"] is True
               for r in GPU_RULES for _, c in own.get(r, []))
    unnamed = lambda commands: [re.sub(r"--engine-options-file \S+", "--engine-options-file F", c)  # noqa: E731
                                for c in commands]
    assert unnamed(strip(own)) == unnamed(strip(plain))   # the options' file the one difference
    assert sorted(str({k: v for k, v in options(c).items() if k != "worker_process"}) for c in strip(own)) == \
        sorted(str(options(c)) for c in strip(plain))
    assert all("worker_process" not in options(c) for r in GPU_RULES for _, c in plain.get(r, []))  # the default's

    tp2 = dict(vllm, engine=dict(vllm["engine"], tensor_parallel_size=2))
    for rule, runs in dry_run(tmp_path, tp2, "--resources", "gpu=4").items():
        if rule in GPU_RULES:
            assert all(t == "2" and " --gpu-slots 4 " in c for t, c in runs), runs  # 4 cores x 2 / 4

    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(tp2))
    proc = subprocess.run([*SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--directory", str(tmp_path / "w"),
                           "--configfile", str(tmp_path / "bad.yaml"), "--cores", "4", "-n", "--resources", "gpu=3"],
                          capture_output=True, text=True)
    assert proc.returncode != 0 and "--resources gpu=3: each GPU job uses 2 GPUs" in proc.stdout + proc.stderr


@pytest.mark.slow
def test_dry_run_cpu_default_is_unchanged_by_gpu_resources(tiny_model_dir, tmp_path):
    cpu = tiny_config(tiny_model_dir)
    plain, with_gpus = dry_run(tmp_path, cpu), dry_run(tmp_path, cpu, "--resources", "gpu=2")
    assert plain == with_gpus
    for rule in GPU_RULES:
        assert all(t == "4" and "--gpu-slots" not in c for t, c in plain.get(rule, [])), plain.get(rule)


@pytest.mark.slow
def test_dry_run_racing_rounds_use_every_gpu(tiny_model_dir, tmp_path):
    """A racing round splits its members over at least one job per GPU, however large the shard size
    (bench/results/racing/racing_h200x2.json had every round on one GPU of two: 0.50x full evaluation's seeds/s)."""
    racing = tiny_config(tiny_model_dir, engine={"kind": "vllm", "device": "cuda", "tensor_parallel_size": 1},
                         gsm8k={"n_train": 24}, population={"shard_size": 64},
                         selection={"mode": "racing", "first_slice": 6, "growth": 2.0})   # rounds of 6, 12, 24
    pair = dry_run(tmp_path, racing, "--resources", "gpu=2")
    assert len(pair["race_slice"]) == 3 * 2 and len(pair["race_round"]) == 3
    # the racing plan every job reads (randopt/selection/plan.py) says how many run side by side
    plan = lambda command: flag_block(command, "--plan-file", tmp_path / "w")  # noqa: E731
    assert all(plan(c)["parallel"] == 2 and " --gpu-slots 2 " in c for _, c in pair["race_slice"])
    one = dry_run(tmp_path, racing)            # one GPU job at a time: one chunk a round
    assert len(one["race_slice"]) == 3 and all(plan(c)["parallel"] == 1 for _, c in one["race_slice"])


@pytest.mark.slow
def test_racing_that_cannot_stop_anyone_says_so_at_dag_build(tiny_model_dir, tmp_path):
    """With the torch engine the checkpoints are whole answer blocks of engine.batch_size: a split
    within one block is a single round, and the DAG build says why no member can stop."""
    racing = tiny_config(tiny_model_dir, gsm8k={"n_train": 8}, selection={"mode": "racing", "first_slice": 4})
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(racing))   # tiny_config's batches of 8
    proc = subprocess.run([*SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--directory", str(tmp_path / "w"),
                           "--configfile", str(tmp_path / "c.yaml"), "--cores", "2", "-n"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "single round" in proc.stderr and "engine.batch_size 8" in proc.stderr
    racing["engine"] = dict(racing["engine"], batch_size=4)       # blocks of 4: rounds of 4 and 8
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(racing))
    proc = subprocess.run([*SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--directory", str(tmp_path / "w"),
                           "--configfile", str(tmp_path / "c.yaml"), "--cores", "2", "-n"], capture_output=True, text=True)
    assert proc.returncode == 0 and "single round" not in proc.stderr, proc.stderr[-2000:]
