"""A throwaway one-node SLURM cluster on this machine, for tests/test_slurm.py.

munged, slurmctld and slurmd run in the foreground as children of the test, with every file (config,
key, sockets, state, spool, logs) in one temporary directory and on free ports, so nothing of the
machine's own SLURM or munge setup is used or touched. The node offers two fake GPUs as GRES (plain
files for device files, AutoDetect=off), which is enough for SLURM to schedule a job that asks for GPUs.
Client commands (sbatch, squeue, scontrol, ...) find the cluster through SLURM_CONF in `env`.
stop() cancels the cluster's jobs and ends the three daemons by their pids."""
from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
APT_PACKAGES = ["slurm-wlm", "munge"]
GPU_TYPE = "fake"
N_GPUS = 2


class SlurmUnavailable(RuntimeError):
    """SLURM is not installed and cannot be installed here (no root, no apt-get, apt-get failed): the
    test skips with the reason on a developer machine and fails under CI=true, where SLURM is meant to
    run. A cluster that is installed but does not come up is a failure everywhere."""


def ensure_installed() -> None:
    """Install slurm-wlm and munge with apt-get when the daemons are missing."""
    if all(shutil.which(d) for d in DAEMONS) and shutil.which("sbatch"):
        return
    if os.geteuid() != 0:
        raise SlurmUnavailable("slurmctld/slurmd/munged are not installed and installing them needs root "
                               f"(apt-get install {' '.join(APT_PACKAGES)})")
    if not shutil.which("apt-get"):
        raise SlurmUnavailable("slurmctld/slurmd/munged are not installed and there is no apt-get to install them")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *APT_PACKAGES]
    proc = subprocess.run(install, env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:  # package lists may be missing or stale on a fresh machine
        subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, text=True, timeout=600)
        proc = subprocess.run(install, env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0 or not all(shutil.which(d) for d in DAEMONS):
        raise SlurmUnavailable(f"apt-get install {' '.join(APT_PACKAGES)} failed:\n{proc.stderr[-2000:]}")


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _real_memory_mb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    return 2048


class SlurmCluster:
    def __init__(self, root: Path, *, cpus: int | None = None):
        self.root = Path(root)
        self.node = socket.gethostname().split(".")[0]
        # Jobs of the tiny workflow ask 2 CPUs each; a node of at least 4 lets two of them run side by
        # side (config_overrides: slurmd reports the configured CPUs, not the hardware's).
        self.cpus = cpus or max(4, os.cpu_count() or 1)
        self.memory_mb = max(1024, int(_real_memory_mb() * 0.8))
        self.procs: dict[str, subprocess.Popen] = {}
        self.conf = self.root / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        for var in [v for v in self.env if v.startswith(("SLURM_", "SBATCH_", "SRUN_", "SQUEUE_"))]:
            if var != "SLURM_CONF":
                del self.env[var]

    # -- setup ----------------------------------------------------------------------------------
    def _write_files(self) -> None:
        r = self.root
        for sub in ("state", "spool", "munge"):
            (r / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(r / "munge", 0o700)
        key = r / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
        ctld_port, slurmd_port = _free_ports(2)
        self.munge_socket = r / "munge" / "munge.socket"
        self.conf.write_text(f"""\
ClusterName=randopt-test
SlurmctldHost={self.node}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={self.munge_socket}
CredType=cred/munge
StateSaveLocation={r / 'state'}
SlurmdSpoolDir={r / 'spool'}
SlurmctldPidFile={r / 'slurmctld.pid'}
SlurmdPidFile={r / 'slurmd.pid'}
SlurmctldLogFile={r / 'slurmctld.log'}
SlurmdLogFile={r / 'slurmd.log'}
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/builtin
SlurmdParameters=config_overrides
ReturnToService=2
# finished jobs stay visible to squeue and scontrol for an hour: the SLURM test's runs are made in the
# background while other tests run (tests/support/slurm_runs.py), and read when the test gets there
MinJobAge=3600
KillWait=5
InactiveLimit=0
GresTypes=gpu
PlugStackConfig={r / 'plugstack.conf'}
NodeName={self.node} NodeAddr=127.0.0.1 CPUs={self.cpus} RealMemory={self.memory_mb} Gres=gpu:{GPU_TYPE}:{N_GPUS} State=UNKNOWN
PartitionName=debug Nodes={self.node} Default=YES MaxTime=INFINITE State=UP
""")
        (r / "plugstack.conf").write_text("")
        self._write_srun_shim()
        # SLURM 22.05 drops a GPU without File= from the node ("Removing file-less GPU"), and the node
        # then registers fewer GPUs than configured and is drained. Plain files stand in for the device
        # files: slurmd logs that they are not devices but counts them, and nothing here opens them.
        for i in range(N_GPUS):
            (r / f"fakegpu{i}").write_text("")
        (r / "gres.conf").write_text(f"AutoDetect=off\nNodeName={self.node} Name=gpu Type={GPU_TYPE} "
                                     f"File={r}/fakegpu[0-{N_GPUS - 1}]\n")

    def _write_srun_shim(self) -> None:
        """Inside a job, snakemake-executor-plugin-slurm-jobstep (0.6.1) runs the rule through srun with
        every SLURM_* variable removed but the job's identity, SLURM_CONF too. A real cluster's clients
        find slurm.conf at its default path (or configless, through slurmd); this cluster's lives in a
        temporary directory, so an `srun` first on the jobs' PATH puts SLURM_CONF back (sbatch exports
        PATH to the job) and runs the real one."""
        real = shutil.which("srun")
        shim_dir = self.root / "bin"
        shim_dir.mkdir(exist_ok=True)
        shim = shim_dir / "srun"
        shim.write_text(f"#!/bin/sh\nSLURM_CONF={self.conf}\nexport SLURM_CONF\nexec {real} \"$@\"\n")
        shim.chmod(0o755)
        self.env["PATH"] = f"{shim_dir}{os.pathsep}{self.env.get('PATH', '')}"

    def _spawn(self, name: str, cmd: list[str]) -> None:
        log = open(self.root / f"{name}.out", "w")
        self.procs[name] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            env=self.env, cwd=self.root)
        log.close()

    def _wait(self, what: str, check, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited ({proc.returncode}) while waiting for {what}:\n"
                                           f"{self.daemon_output(name)}")
            if check():
                return
            time.sleep(0.3)
        raise RuntimeError(f"timed out waiting for {what}:\n" +
                               "\n".join(self.daemon_output(n) for n in self.procs))

    def daemon_output(self, name: str) -> str:
        text = ""
        for path in (self.root / f"{name}.out", self.root / f"{name}.log"):
            if path.is_file():
                text += f"--- {path.name}\n{path.read_text()[-3000:]}\n"
        return text

    def start(self) -> "SlurmCluster":
        ensure_installed()
        self._write_files()
        self._spawn("munged", ["munged", "--foreground", "--force", f"--socket={self.munge_socket}",
                               f"--key-file={self.root / 'munge' / 'munge.key'}",
                               f"--pid-file={self.root / 'munge' / 'munged.pid'}",
                               f"--seed-file={self.root / 'munge' / 'munged.seed'}",
                               f"--log-file={self.root / 'munged.log'}"])
        self._wait("the munge socket", self.munge_socket.exists)
        self._spawn("slurmctld", ["slurmctld", "-D", "-f", str(self.conf)])
        self._wait("slurmctld", lambda: self.run("scontrol", "ping", check=False).returncode == 0)
        self._spawn("slurmd", ["slurmd", "-D", "-f", str(self.conf), "-N", self.node])
        self._wait("the node to be idle", lambda: "idle" in self.run("sinfo", "-h", "-o", "%t", check=False).stdout,
                   timeout=60)
        return self

    # -- use ------------------------------------------------------------------------------------
    def run(self, *cmd: str, check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run(list(cmd), env=self.env, capture_output=True, text=True, timeout=60)
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr}")
        return proc

    def show_job(self, job_id: str) -> dict[str, str]:
        """`scontrol show job` as a dict of its Key=Value fields (the controller keeps finished jobs
        for MinJobAge seconds)."""
        text = self.run("scontrol", "show", "job", "-o", str(job_id)).stdout
        fields = {}
        for match in re.finditer(r"(\w[\w:/]*)=(.*?)(?=\s+\w[\w:/]*=|\s*$)", text.strip()):
            fields[match.group(1)] = match.group(2)
        return fields

    def submitted_job_ids(self) -> list[str]:
        """Every batch job the controller accepted, from its log."""
        log = (self.root / "slurmctld.log").read_text()
        return re.findall(r"_slurm_rpc_submit_batch_job: JobId=(\d+)", log)

    # -- teardown -------------------------------------------------------------------------------
    def stop(self) -> None:
        if self.procs.get("slurmctld") and self.procs["slurmctld"].poll() is None:
            jobs = self.run("squeue", "-h", "-o", "%i", check=False).stdout.split()
            if jobs:
                self.run("scancel", *jobs, check=False)
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline and self.run("squeue", "-h", "-o", "%i", check=False).stdout.strip():
                    time.sleep(0.5)
        for name in reversed(DAEMONS):
            proc = self.procs.get(name)
            if proc is None or proc.poll() is not None:
                continue
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
