"""Run the real workflow (snakemake) on a tiny model and tiny data in a temp dir."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from tests.conftest import REPO, SHARED_GSM8K

SNAKEMAKE = [sys.executable, "-m", "snakemake"]
# What a test module computes once for the session and another module reads too (tests/test_stage_clis.py
# says what): here, since a test file imported from another test file is a second module object.
SESSION_MEMO: dict = {}


def tiny_config(model_dir: Path, **overrides) -> dict:
    gsm8k = ({"source": "jsonl", "jsonl": {"path": str(SHARED_GSM8K)}} if (SHARED_GSM8K / "train.jsonl").is_file()
             else {"source": "generated", "generated": {"seed": 1, "n_train_pool": 50, "n_test_pool": 50}})
    config = {
        "run_name": "tiny",
        "model": {"source": "local", "id": "tiny-random-qwen2", "path": str(model_dir)},
        "engine": {"kind": "torch", "device": "cpu", "batch_size": 8},
        "task": {"gsm8k": {**gsm8k, "n_train": 4, "n_test": 6, "selection_seed": 0}},
        "heldout": {"source": "synthetic", "synthetic": {"n_docs": 4, "seed": 1}, "max_context": 64},
        "decode": {"max_tokens": 8},
        "population": {"n_seeds": 4, "sigmas": [0.01, 0.02], "shard_size": 2},
        "topk": {"fractions": [0.25, 0.5]},
    }
    for key, value in overrides.items():
        # gsm8k=...: keys of the GSM8K task's block (task.gsm8k), merged over the tiny run's
        into, key = (config["task"], "gsm8k") if key == "gsm8k" else (config, key)
        into[key] = value if not isinstance(value, dict) else {**into.get(key, {}), **value}
    return config


# The generated GSM8K-style source of the embedded default (what `make record` reads), whether or not
# the GSM8K copy is there.
GENERATED_GSM8K = {"source": "generated", "generated": {"seed": 1, "n_train_pool": 50, "n_test_pool": 50}}

def unguessable_gsm8k(root: Path) -> dict:
    """A gsm8k block reading GSM8K-format splits (8 problems each) written under root, whose every answer has nine
    digits or more: for tests whose premise is that the tiny random model answers nothing right. Its 8 tokens never
    hit such a number, where the generated source's one-digit answers were hit by chance (seed 2 at σ 0.01
    answered "4" once), and whether ../shared's GSM8K is there changes nothing."""
    root.mkdir(parents=True, exist_ok=True)
    for split in ("train", "test"):
        rows = [{"question": f"A vault holds {i} boxes of 123456789 coins and one more box. How many coins?",
                 "answer": f"{i} * 123456789 + 123456789 = {(i + 1) * 123456789}\n#### {(i + 1) * 123456789}"}
                for i in range(1, 9)]
        (root / f"{split}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return {"source": "jsonl", "jsonl": {"path": str(root)}}


# Cluster resources of the heavy stages (profiles/slurm; tests/test_slurm.py): small jobs, two side by
# side on the test node; threads (2) equal a local run's --cores 2. They change no result and no local
# run (rules/common.smk), only what a SLURM job asks for, and the record's config.
HEAVY_STAGES = ("prepare_model", "evaluate_shard", "evaluate_members", "score_bpb")
CLUSTER_RESOURCES = {"cpus_per_task": 2, "cpus_per_gpu": 1,
                     "mem_mb": {s: 1000 for s in HEAVY_STAGES}, "runtime": {s: 10 for s in HEAVY_STAGES}}


def shared_run_config(model_dir: Path) -> dict:
    """The config of the one finished tiny run the tests share (fixture tiny_run, tests/conftest.py):
    the tiny defaults on the generated source, with the cluster resources, so that the SLURM test's
    local run is this one too."""
    return tiny_config(model_dir, gsm8k=GENERATED_GSM8K, resources=CLUSTER_RESOURCES)


@dataclass(frozen=True)
class FinishedRun:
    """A finished run of the workflow: its work dir, config and Snakemake's output. Shared by several
    test modules, so nobody writes into workdir: a test that runs anything there works on copy_to()."""
    workdir: Path
    config: dict
    proc: subprocess.CompletedProcess

    def copy_to(self, dest: Path) -> Path:
        """The whole work dir (data/, results/, logs/, .snakemake/ with its metadata) at dest, every file
        with its bytes and mtime (shutil.copy2), links as links (the local model dir stays linked): for
        Snakemake, and for file_states(), the same finished run."""
        shutil.copytree(self.workdir, dest, symlinks=True, dirs_exist_ok=True)
        return dest


def effective_config(overlay: dict) -> dict:
    """The config Snakemake runs: config/config.yaml with the overlay deep-merged over it (as
    --configfile does), validated. Keys computed from the overlay alone would miss the default file's
    values (e.g. task.gsm8k.generated.difficulty) and name other paths than the workflow's."""
    from snakemake.utils import update_config

    from randopt.config import validate
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    update_config(config, json.loads(json.dumps(overlay)))
    return validate(config)


def workflow_command(workdir: Path, config: dict, *extra: str, repo: Path = REPO) -> list[str]:
    """The plain command on a tiny config (written to workdir/tiny.yaml), run with repo's Snakefile."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "tiny.yaml").write_text(yaml.safe_dump(config))
    return [*SNAKEMAKE, "--snakefile", str(repo / "Snakefile"), "--directory", str(workdir),
            "--configfile", str(workdir / "tiny.yaml"), "--cores", "2", *extra]


# What a copy of the code leaves out: at the top level, the checkout's own runs (data/ and results/
# are the pipeline's inputs and outputs, not code; randopt/data/ is code and is copied) and a package build's
# folder, and anywhere, caches, environments and build metadata.
_NOT_CODE_TOP = {".git", ".venv", "data", "results", "logs", ".snakemake", "RECORDS.md", "build"}
_NOT_CODE_ANYWHERE = shutil.ignore_patterns("__pycache__", ".pytest_cache", ".whl*", ".venv*", "*.egg-info")


def copy_code(dest: Path) -> Path:
    """A copy of this checkout's code (no git metadata, no runs) at dest."""
    def ignore(folder, names):
        top = _NOT_CODE_TOP & set(names) if Path(folder) == REPO else set()
        return top | _NOT_CODE_ANYWHERE(folder, names)
    shutil.copytree(REPO, dest, ignore=ignore)
    return dest


def failure_report(workdir: Path, proc: subprocess.CompletedProcess) -> str:
    logs = "\n".join(f"--- {p}\n{p.read_text()[-3000:]}" for p in sorted((workdir / "logs").rglob("*.log")))
    return f"snakemake failed ({proc.returncode}):\n{proc.stderr[-6000:]}\n{logs}"


def run_workflow(workdir: Path, config: dict, *extra: str, check: bool = True,
                 repo: Path = REPO, env: dict | None = None) -> subprocess.CompletedProcess:
    """env: variables set for this run only (over the process's own)."""
    cmd = workflow_command(workdir, config, *extra, repo=repo)
    # No wall-clock limit: on cores shared with other work a run takes what it takes; it ends when
    # Snakemake does (a hung run is the CI job's timeout to catch, not a threshold of this test).
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env} if env else None)
    if check and proc.returncode != 0:
        raise AssertionError(failure_report(workdir, proc))
    return proc


def run_and_kill(workdir: Path, config: dict, kill_now: Callable[[], bool], *extra: str,
                 poll_s: float = 0.02) -> subprocess.CompletedProcess:
    """Start the workflow in its own process group; as soon as kill_now() (a fact on disk) is true,
    SIGKILL the whole group (Snakemake and every job it started: local jobs share its group) and wait
    until none of them is left. Fails if the run ends before kill_now() was ever true (the kill point
    was missed). Event-based: no wall-clock limit."""
    cmd = workflow_command(workdir, config, *extra)
    out, err = workdir / "killed.stdout", workdir / "killed.stderr"
    with out.open("w") as fout, err.open("w") as ferr:
        proc = subprocess.Popen(cmd, stdout=fout, stderr=ferr, start_new_session=True)
        try:
            while not kill_now():
                if proc.poll() is not None:
                    raise AssertionError(f"the run ended (rc {proc.returncode}) before the kill point:\n"
                                         f"{err.read_text()[-4000:]}")
                time.sleep(poll_s)
        finally:
            with_group_killed(proc)
    return subprocess.CompletedProcess(cmd, proc.returncode, out.read_text(), err.read_text())


def with_group_killed(proc: subprocess.Popen, timeout: float = 30) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:  # orphaned jobs of the group are reaped by init
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    raise AssertionError(f"processes of group {proc.pid} survived SIGKILL")


def file_states(root: Path, under: tuple[str, ...] = ("data", "results")) -> dict[str, tuple[str, int]]:
    """relative path -> (sha256, mtime_ns) of every file below root/<each of under>: the pipeline's
    inputs (data/) and what it computes (results/). rglob does not enter symlinked dirs such as a
    linked model dir."""
    states = {}
    for path in sorted(p for folder in under for p in (root / folder).rglob("*")):
        if path.is_file():
            states[path.relative_to(root).as_posix()] = (hashlib.sha256(path.read_bytes()).hexdigest(),
                                                         path.stat().st_mtime_ns)
    return states


def jobs_run(proc: subprocess.CompletedProcess) -> dict[str, int]:
    """Rule -> number of jobs Snakemake reports it ran (its 'Job stats' table); `all` left out."""
    from bench.jobstats import job_counts
    return job_counts(proc.stdout + proc.stderr)


# What every run ends with, after the stages its record reads: the record, its figures, then the copy of the record
# at results/record.json that names the run (rules/record.smk, report.smk, last_run.smk); a run or a dry run of
# the default target or of results/record.json lists all three.
RUN_END = {"record": 1, "figures": 1, "last_record": 1}


def read_record(workdir: Path) -> dict:
    """The last finished run's record (results/record.json, a copy of its run folder's)."""
    return json.loads((workdir / "results" / "record.json").read_text())


def last_run_folder(workdir: Path) -> Path:
    """The folder of the last finished run (its record and figures), as results/record.json names it."""
    return workdir / read_record(workdir)["run"]["dir"]


def records_md(workdir: Path) -> str:
    """The RECORDS.md table of the runs in workdir (config records_md: results/RECORDS.md by default)."""
    return (workdir / "results" / "RECORDS.md").read_text()


def targets_after_a_finished_run(dest: Path, run: FinishedRun) -> dict:
    """What tests/test_workflow_e2e.py asks Snakemake for after the shared finished run, on a copy of
    it (dest), in the order its tests ask: a dry run (nothing left to do), the export target, then the
    report (outside results/). Queued at the end of the session's background queue (fixture
    e2e_targets_started, tests/conftest.py): the module is the session's last to run Snakemake, when the
    queue is otherwise done and one core idles; its other tests read their own copy of the run.
    {"workdir", "dry_run", "export", "report" (its path), "report_proc"}."""
    workdir = run.copy_to(dest)
    config = yaml.safe_load((workdir / "tiny.yaml").read_text())
    done = {"workdir": workdir, "dry_run": run_workflow(workdir, config, "-n")}
    done["export"] = run_workflow(workdir, config, "export")
    done["report"] = workdir / "report.html"
    done["report_proc"] = subprocess.run([*SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
                                          "--configfile", str(workdir / "tiny.yaml"), "--report", str(done["report"])],
                                         capture_output=True, text=True, timeout=600)
    return done


def gsm8k_task(source: dict) -> dict:
    """The GSM8K task spec (randopt/config.py task_spec) of one source {"kind": ..., **its block}."""
    return {"kind": "gsm8k", "source": source["kind"], source["kind"]: {k: v for k, v in source.items() if k != "kind"}}
