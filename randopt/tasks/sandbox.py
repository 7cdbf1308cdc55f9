"""Running untrusted code: one program in a process of its own, with a wall-clock timeout, a scratch
directory deleted afterwards, and a pass only when the program and its tests returned normally.

The child (randopt/tasks/sandbox_child.py) sets the limits, the uid and the audit hook, runs the program
and, once it returned, writes this run's token to the report, a file without a name that it holds by fd;
the token reaches it on stdin. An exit status of 0 is not a pass (sys.exit(0), os._exit(0) and an
atexit handler give one). A run never hangs its caller and leaves no process behind: at its end, passed
or not, its process group is killed (it can hold no other process: RLIMIT_NPROC is 0 in the child,
whose uid is not root's). run_many runs programs side by side, one process per core.
"""
from __future__ import annotations

import functools
import logging
import os
import secrets
import select
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
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Outcome:
    passed: bool
    reason: str | None  # None when passed


@functools.cache
def _warn(note: str) -> None:
    """The child's notes (a root sandbox that could not drop to another uid), once per process."""
    log.warning(note)


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
    if returncode == 0 or not stderr.strip():
        return f"ended before its tests finished (exit status {returncode}, no pass reported)"
    last = stderr.strip().splitlines()[-1][:200]
    return ("tests failed: " if "AssertionError" in stderr else "error: ") + last


def _ended_within(proc: subprocess.Popen, timeout_s: float) -> bool:
    """Whether proc ended within timeout_s (not reaped yet), told by its pidfd the moment it ends:
    Popen.wait(timeout) polls with sleeps doubling to 50 ms, which took a run of ~30 ms to ~64 ms."""
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # a kernel before 5.3: Popen's polling
        try:
            proc.wait(timeout=timeout_s)
            return True
        except subprocess.TimeoutExpired:
            return False
    try:
        return bool(select.select([pidfd], [], [], timeout_s)[0])
    finally:
        os.close(pidfd)


def run_program(source: str, *, timeout_s: float, memory_mb: int) -> Outcome:
    """Run source as a script in a fresh scratch directory; passed when it returned normally, within
    the limits, and so reported."""
    scratch = Path(tempfile.mkdtemp(prefix="randopt-sandbox-"))
    try:
        program = scratch / "completion.py"
        program.write_text(source, encoding="utf-8")
        token = secrets.token_hex(16).encode()
        env = {"PATH": "/usr/bin:/bin", "HOME": str(scratch), "TMPDIR": str(scratch), "LANG": "C.UTF-8",
               "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}
        # stderr and the report are files without a name (no path leads to them), shared by fd only
        # The wall-clock timeout bounds the run; the CPU limit, a second longer, is the backstop should the kill
        # fail. At the same second, a busy loop's CPU seconds raced the wall clock (they start before the parent's
        # timer does) and the reason a loop got flipped between "timed out" and "CPU time limit exceeded".
        cpu_s = int(timeout_s + 0.999) + 1
        with tempfile.TemporaryFile() as err, tempfile.TemporaryFile() as report:
            proc = subprocess.Popen([sys.executable, "-I", "-S", str(CHILD), str(program), str(memory_mb),
                                     str(cpu_s), str(report.fileno())],
                                    cwd=scratch, env=env, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                    stderr=err, pass_fds=(report.fileno(),), start_new_session=True)
            try:
                try:
                    proc.stdin.write(token)
                    proc.stdin.close()
                except BrokenPipeError:
                    pass  # it ended before it read the token: no pass
                timed_out = not _ended_within(proc, timeout_s)
            finally:  # whatever is left of it dies with it
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                returncode = proc.wait()
            err.seek(max(0, err.seek(0, os.SEEK_END) - TAIL))
            stderr = err.read().decode("utf-8", "replace")
            report.seek(0)
            passed = report.read() == token
        notes = [line for line in stderr.splitlines() if line.startswith(sandbox_child.NOTE)]
        for note in notes:
            _warn(note)
        if timed_out:
            return Outcome(False, f"timed out after {timeout_s:g} s")
        if passed:
            return Outcome(True, None)
        return Outcome(False, _reason(returncode, "\n".join(l for l in stderr.splitlines() if l not in notes)))
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
