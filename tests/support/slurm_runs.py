"""The runs tests/test_slurm.py checks, on a throwaway cluster (tests/support/slurm_cluster.py), made in a
background thread.

Most of a run through the SLURM executor is waiting: snakemake-executor-plugin-slurm (2.8) checks its
jobs' states --slurm-init-seconds-before-status-checks (1 s) after a submission, and after each check
that finds no job finished it waits 10 s longer than the last time (11 s, 21 s, ...), so a job of 15 s
is seen finished at 33 s; each job is also a whole Snakemake process in remote mode before its rule. Run on its own, the SLURM test
spends about two minutes on that, the cores idle. So when SLURM tests are selected the session starts
these runs at its start (fixture early_runs, tests/conftest.py), and the SLURM test collects them
when it gets there. What runs is what the test ran itself before:

- main: the session's tiny config (tests/support/workflow.py, shared_run_config) run to the end with
  --profile profiles/slurm, in its own work dir;
- gpu: then, in the same dir (the model is prepared), one shard of that config on a vLLM engine with
  tensor_parallel_size 2, so that its job asks SLURM for two of the node's fake GPUs (the job itself
  fails: no vLLM and no GPU here);
- engines: then the main run's first shard again, its answers taken out of the answer cache, with
  engine.engines_per_gpu 2: one job that runs two engines of its own inside it (randopt/runtime/job_engines.py),
  to give the shard the main run wrote (kept beside it as engines_baseline.parquet).

No run has a wall-clock limit, as before: each ends when Snakemake does."""
from __future__ import annotations

import shutil
import subprocess
import threading
from pathlib import Path

import yaml

from tests.conftest import REPO
from tests.support.slurm_cluster import GPU_TYPE, SlurmCluster, SlurmUnavailable
from tests.support.workflow import CLUSTER_RESOURCES, SNAKEMAKE, effective_config

PROFILE = REPO / "profiles" / "slurm"


def slurm_command(workdir: Path, config: dict, *extra: str, configfile: str = "tiny.yaml") -> list[str]:
    """snakemake --profile profiles/slurm, launched in workdir as a user would from a login node."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / configfile).write_text(yaml.safe_dump(config))
    return [*SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--configfile", str(workdir / configfile),
            "--profile", str(PROFILE),
            # no accounting on the test cluster: sacct cannot answer, squeue can (MinJobAge, slurm_cluster.py)
            "--slurm-status-command", "squeue", "--slurm-init-seconds-before-status-checks", "1",
            "--latency-wait", "5", *extra]


def failure_report(workdir: Path, proc: subprocess.CompletedProcess, cluster: SlurmCluster) -> str:
    logs = "\n".join(f"--- {p}\n{p.read_text()[-3000:]}" for p in sorted((workdir / "logs").rglob("*.log")))
    return (f"snakemake on SLURM failed ({proc.returncode}):\n{proc.stderr[-8000:]}\n{logs}\n"
            f"{cluster.daemon_output('slurmctld')}{cluster.daemon_output('slurmd')}")


def gpu_stage_config(config: dict) -> dict:
    """config on a vLLM engine with tensor_parallel_size 2, its GPU stages asking for GPUs of GPU_TYPE."""
    return config | {"engine": {"kind": "vllm", "device": "cuda", "batch_size": 8, "tensor_parallel_size": 2},
                     "resources": CLUSTER_RESOURCES | {"gpu_model": GPU_TYPE}}


def gpu_stage_shard(config: dict) -> str:
    """The first shard of the GPU config: the one target of the gpu run."""
    return first_shard(gpu_stage_config(config))


def first_shard(config: dict) -> str:
    from randopt.keys import run_keys
    key = run_keys(effective_config(config))["eval"]
    return f"results/shards/{key}/sigma=0.01/seeds_0000-0001.parquet"


def engines_config(config: dict) -> dict:
    """config with two engines inside each train-scoring cluster job."""
    return config | {"engine": {**config.get("engine", {}), "engines_per_gpu": 2}}


class SlurmRuns:
    """start() brings up the cluster and runs main then gpu in a thread; cluster_ready() and result()
    wait for them (and raise what went wrong: SlurmUnavailable, or an AssertionError with the logs);
    stop() ends a run still going and stops the cluster, by pid."""

    def __init__(self, root: Path, config: dict):
        self.root, self.config = Path(root), config
        self.cluster = SlurmCluster(self.root / "cluster")
        self.workdir = self.root / "on-slurm"
        self.gpu_config = gpu_stage_config(config)
        self.main: subprocess.CompletedProcess | None = None
        self.gpu: subprocess.CompletedProcess | None = None
        self.engines: subprocess.CompletedProcess | None = None
        self._error: BaseException | None = None
        self._cluster_up = False
        self._up = threading.Event()
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="slurm-runs", daemon=True)

    def start(self) -> "SlurmRuns":
        self._thread.start()
        return self

    def _snakemake(self, cmd: list[str]) -> subprocess.CompletedProcess:
        with self._lock:
            if self._stopping:
                raise RuntimeError("the session ended before the SLURM runs")
            self._proc = subprocess.Popen(cmd, cwd=self.workdir, env=self.cluster.env, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True)
        out, err = self._proc.communicate()
        return subprocess.CompletedProcess(cmd, self._proc.returncode, out, err)

    def _run(self) -> None:
        try:
            self.cluster.start()
            self._cluster_up = True
        except BaseException as err:  # SlurmUnavailable: the test skips (fails under CI=true); else it fails
            self._error = err
            return
        finally:
            self._up.set()
        try:
            main = self._snakemake(slurm_command(self.workdir, self.config))
            if main.returncode != 0:
                raise AssertionError(failure_report(self.workdir, main, self.cluster))
            self.main = main
            self.gpu = self._snakemake(slurm_command(self.workdir, self.gpu_config, "--retries", "0", "--verbose",
                                                     gpu_stage_shard(self.config), configfile="gpu.yaml"))
            shard = self.workdir / first_shard(self.config)
            shutil.copyfile(shard, self.workdir / "engines_baseline.parquet")
            shutil.rmtree(shard.parent.parent / "cache")   # every answer generated again, by the job's two engines
            # the target before --forcerun, whose list of rules would take it in
            self.engines = self._snakemake(slurm_command(self.workdir, engines_config(self.config),
                                                         str(shard.relative_to(self.workdir)), "--retries", "0",
                                                         "--forcerun", "evaluate_shard", configfile="engines.yaml"))
        except BaseException as err:  # handed to the test that collects the runs
            self._error = err

    def cluster_ready(self) -> SlurmCluster:
        """The running cluster; SlurmUnavailable (or what else failed) when it did not come up."""
        self._up.wait()
        if not self._cluster_up:
            raise self._error
        return self.cluster

    def result(self) -> "SlurmRuns":
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self

    def stop(self) -> None:
        with self._lock:
            self._stopping = True
            if self._proc is not None and self._proc.poll() is None:
                self._proc.terminate()   # Snakemake cancels its SLURM jobs
        self._thread.join(timeout=120)
        self.cluster.stop()
