"""Running untrusted code: one program in a separate process with a wall-clock timeout, memory and CPU
limits, no network and a scratch directory deleted afterwards (randopt/tasks/sandbox_child.py sets the
limits and the audit hook inside it). A run never hangs its caller: on the timeout the whole process
group is killed. run_many runs programs side by side, one process per core.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from randopt.tasks import sandbox_child

CHILD = Path(sandbox_child.__file__).resolve()
TAIL = 2000  # characters of the program's stderr kept for the reason


@dataclass(frozen=True)
class Outcome:
    passed: bool
    reason: str | None  # None when passed


def _reason(returncode: int, stderr: str) -> str:
    if sandbox_child.VIOLATION in stderr:
        line = next(l for l in reversed(stderr.splitlines()) if sandbox_child.VIOLATION in l)
        return line.split("PermissionError: ", 1)[-1].strip()
    if "MemoryError" in stderr:
        return "memory limit exceeded"
    if returncode in (-signal.SIGXCPU, -signal.SIGKILL):
        return "CPU time limit exceeded" if returncode == -signal.SIGXCPU else "killed (memory or CPU limit)"
    if "SyntaxError" in stderr or "IndentationError" in stderr:
        return "syntax error: " + stderr.strip().splitlines()[-1][:200]
    last = stderr.strip().splitlines()[-1][:200] if stderr.strip() else f"exit status {returncode}"
    return ("tests failed: " if "AssertionError" in stderr else "error: ") + last


def run_program(source: str, *, timeout_s: float, memory_mb: int) -> Outcome:
    """Run source as a script in a fresh scratch directory; passed when it exits 0 within the limits."""
    scratch = Path(tempfile.mkdtemp(prefix="randopt-sandbox-"))
    try:
        program = scratch / "completion.py"
        program.write_text(source, encoding="utf-8")
        env = {"PATH": "/usr/bin:/bin", "HOME": str(scratch), "TMPDIR": str(scratch), "LANG": "C.UTF-8",
               "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}
        with open(scratch / "stderr", "wb") as err:
            proc = subprocess.Popen([sys.executable, "-I", "-S", str(CHILD), str(program), str(memory_mb),
                                     str(max(1, int(timeout_s + 0.999)))],
                                    cwd=scratch, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=err, start_new_session=True)
            try:
                returncode = proc.wait(timeout=timeout_s)
                timed_out = False
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:  # whatever it started dies with it
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
        if timed_out:
            return Outcome(False, f"timed out after {timeout_s:g} s")
        if returncode == 0:
            return Outcome(True, None)
        stderr = (scratch / "stderr").read_bytes()[-TAIL:].decode("utf-8", "replace")
        return Outcome(False, _reason(returncode, stderr))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def job_cores() -> int:
    """The cores this process may run on (a job's share under Snakemake or SLURM)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def run_many(sources: list[str], *, timeout_s: float, memory_mb: int, workers: int | None = None) -> list[Outcome]:
    """run_program over many sources, `workers` at a time (default: the job's cores), results in order.
    Threads suffice: each only waits on its process."""
    with ThreadPoolExecutor(max_workers=workers or job_cores()) as pool:
        return list(pool.map(lambda s: run_program(s, timeout_s=timeout_s, memory_mb=memory_mb), sources))
