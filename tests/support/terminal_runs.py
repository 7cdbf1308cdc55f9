"""`randopt run` as a user runs it, on copies of the session's finished tiny run (tests/test_terminal_run.py):
the record and figures made again, to end with the verdict; and a search stopped by Ctrl-C."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from tests.conftest import REPO
from tests.support.workflow import FinishedRun

# randopt importable whatever the run's directory (an installed randopt needs none of this)
ENV = {**os.environ, "PYTHONPATH": str(REPO)}
# A shard long enough to be inside it when Ctrl-C comes: ~0.07 s a seed on the tiny model, after the engine's start.
INTERRUPTED_POPULATION = {"n_seeds": 200, "sigmas": [0.01], "shard_size": 200}


def randopt_run(workdir: Path, configfile: str) -> list[str]:
    return [sys.executable, "-m", "randopt", "run", "--configfile", configfile, "--cores", "2"]


def verdict_run(workdir: Path) -> subprocess.CompletedProcess:
    """The record and the figures made again on the finished run: what ends every run, with its start/done lines."""
    folder = workdir / json.loads((workdir / "results" / "record.json").read_text())["run"]["dir"]
    (workdir / "results" / "record.json").unlink()
    shutil.rmtree(folder)   # the run's own record and figures
    return subprocess.run(randopt_run(workdir, "tiny.yaml"), cwd=workdir, env=ENV, capture_output=True, text=True)


def interrupted_run(workdir: Path) -> subprocess.CompletedProcess:
    """A new population's search (its data and model reused), and SIGINT to the whole process group, as a
    terminal's Ctrl-C sends it, once the shard has logged a finished seed."""
    config = yaml.safe_load((workdir / "tiny.yaml").read_text()) | {"population": INTERRUPTED_POPULATION}
    (workdir / "ctrlc.yaml").write_text(yaml.safe_dump(config))
    out, err = workdir / "run.stdout", workdir / "run.stderr"
    logs = workdir / "logs" / "evaluate_shard"
    with out.open("w") as fout, err.open("w") as ferr:
        proc = subprocess.Popen(randopt_run(workdir, "ctrlc.yaml"), cwd=workdir, env=ENV, stdout=fout, stderr=ferr,
                                start_new_session=True)
        while not any("seed-done" in p.read_text(errors="replace") for p in logs.rglob(f"seeds_0000-0199.log")):
            if proc.poll() is not None:
                raise AssertionError(f"the run ended (rc {proc.returncode}) before Ctrl-C:\n{err.read_text()[-4000:]}")
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=300)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out.read_text(), err.read_text())


def terminal_runs(dest: Path, run: FinishedRun) -> dict:
    """{"verdict": (workdir, proc), "interrupted": (workdir, proc)}, each on its own copy of the finished run."""
    verdict_dir, interrupted_dir = run.copy_to(dest / "verdict"), run.copy_to(dest / "interrupted")
    return {"verdict": (verdict_dir, verdict_run(verdict_dir)),
            "interrupted": (interrupted_dir, interrupted_run(interrupted_dir))}
