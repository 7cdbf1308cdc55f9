"""The code task's verdicts, decided where the model's program cannot reach.

The program (prompt + completion) runs in the candidate's process (sandbox_child.py) inside the OS
sandbox (sandbox.py) and only ever answers calls with plain data. Its tests never enter that process:
- a test that splits (humaneval_split.py; 157 of HumanEval's 164) is decided here: the candidate gets
  all its calls' arguments at once, and this process evaluates each assert over the decoded values;
- any other test runs in a judge process of its own (judge_child.py), in a sandbox of its own, whose
  stand-in candidate forwards each call to the candidate's process and reads back plain data; the
  judge reports its verdict to this process over a pipe only it holds.
So nothing the program does (an object equal to everything, rebinding `check` or `assert`'s
builtins, reading the expected values, writing to its fds, exiting 0) can make a test pass: it can
only choose the values it answers with, as an honest function does.
"""
from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from randopt.tasks import humaneval_split, plain_data, sandbox

MAX_REPLY = 4 << 20  # bytes of the candidate's answers (HumanEval's largest are a few kB), or of a report
TAIL = 2000  # characters of a process's stderr kept for the reason


@dataclass(frozen=True)
class Outcome:
    passed: bool
    reason: str | None  # None when passed


@dataclass(frozen=True)
class Limits:
    timeout_s: float
    memory_mb: int

    @property
    def cpu_s(self) -> int:
        """The CPU limit, a second past the wall clock: a backstop, should the kill fail."""
        return int(self.timeout_s + 0.999) + 1


class _Run:
    """Processes of one verdict, their scratch directories and pipes; all killed and removed on exit."""

    def __init__(self, sandboxed: bool):
        self.sandboxed, self.procs, self.dirs, self.fds, self.errs = sandboxed, [], [], [], []

    def __enter__(self):
        return self

    def pipe(self) -> tuple[int, int]:
        read, write = os.pipe()
        self.fds += [read, write]
        return read, write

    def close(self, *fds: int) -> None:
        for fd in fds:
            self.fds.remove(fd)
            os.close(fd)

    def hand_over(self, fd: int) -> int:
        """fd, no longer closed by the run: its new holder closes it."""
        self.fds.remove(fd)
        return fd

    def start(self, script: str, source: str, entry_point: str, limits: Limits, fds: tuple[int, ...]):
        scratch = Path(tempfile.mkdtemp(prefix="randopt-sandbox-"))
        self.dirs.append(scratch)
        (scratch / "program.py").write_text(source, encoding="utf-8")
        err = tempfile.TemporaryFile()
        self.errs.append(err)
        args = [sandbox.scratch_path(scratch, "program.py", self.sandboxed), entry_point, str(limits.memory_mb),
                str(limits.cpu_s), *map(str, fds)]
        proc = sandbox.start(script, args, scratch, sandboxed=self.sandboxed, pass_fds=fds, stderr=err)
        self.procs.append(proc)
        return proc

    def stderr(self, i: int) -> str:
        err = self.errs[i]
        err.seek(max(0, err.seek(0, os.SEEK_END) - TAIL))
        return err.read().decode("utf-8", "replace")

    def __exit__(self, *exc):
        # bwrap's session, and the sandbox's PID namespace, whose first process is bwrap's child in a
        # session of its own: killing it ends every process in the namespace. Waited for to the last,
        # so no process of this run outlives it.
        inner = [pid for proc in self.procs for pid in _descendants(proc.pid)]
        for pid in inner:
            _kill(pid)
        for proc in self.procs:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for proc in self.procs:
            proc.wait()
        for pid in inner:
            _wait_gone(pid)
        for fd in self.fds:
            os.close(fd)
        for err in self.errs:
            err.close()
        for scratch in self.dirs:
            shutil.rmtree(scratch, ignore_errors=True)


def _descendants(pid: int) -> list[int]:
    """pid's children, theirs and so on (/proc/PID/task/TID/children), nearest first."""
    found, todo = [], [pid]
    while todo:
        parent = todo.pop(0)
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                children = [int(c) for c in Path(f"/proc/{parent}/task/{tid}/children").read_text().split()]
            except OSError:
                continue
            found += children
            todo += children
    return found


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _wait_gone(pid: int, timeout_s: float = 5.0) -> None:
    """Until a process that is not this one's child has ended (its pidfd turns readable)."""
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:  # gone already
        return
    try:
        select.select([pidfd], [], [], timeout_s)
    finally:
        os.close(pidfd)


def _exchange(write_fd: int | None, data: bytes, read_fd: int, deadline: float, until_eof: bool) -> bytes | None:
    """Write data to write_fd, which this closes, while reading read_fd up to a newline or EOF; None
    past the deadline. At most MAX_REPLY bytes are read."""
    got = bytearray()
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready_r, ready_w, _ = select.select([read_fd], [write_fd] if write_fd is not None else [], [], left)
            if ready_w:
                try:
                    data = data[os.write(write_fd, data[:65536]):]
                except BrokenPipeError:
                    data = b""
                if not data:
                    os.close(write_fd)
                    write_fd = None
            if ready_r:
                chunk = os.read(read_fd, 65536)
                got += chunk
                if not chunk or len(got) >= MAX_REPLY or (not until_eof and b"\n" in chunk):
                    return bytes(got)
    finally:
        if write_fd is not None:
            os.close(write_fd)


def _ended(run: _Run, i: int) -> str:
    proc = run.procs[i]
    try:
        code = proc.wait(timeout=1)
    except subprocess.TimeoutExpired:
        code = None
    stderr = run.stderr(i)
    if "MemoryError" in stderr:
        return "memory limit exceeded"
    if code == -signal.SIGXCPU:
        return "CPU time limit exceeded"
    if code == -signal.SIGKILL:
        return "killed (memory or CPU limit)"
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    return f"ended before it answered (exit status {code})" + (f": {lines[-1][:200]}" if lines else "")


def _stop_reason(stop: str) -> str:
    if "SyntaxError" in stop or "IndentationError" in stop:
        return "syntax error: " + stop.split("failed: ", 1)[-1]
    if "MemoryError" in stop:
        return "memory limit exceeded"
    return stop


def _split_verdict(source: str, problem: Mapping[str, Any], split: humaneval_split.Split, limits: Limits,
                   sandboxed: bool) -> Outcome:
    deadline = time.monotonic() + limits.timeout_s
    with _Run(sandboxed) as run:
        calls_r, calls_w = run.pipe()
        answers_r, answers_w = run.pipe()
        run.start("sandbox_child.py", source, problem["entry_point"], limits, (calls_r, answers_w))
        run.close(calls_r, answers_w)
        request = (plain_data.encode(list(split.calls)) + "\n").encode()
        line = _exchange(run.hand_over(calls_w), request, answers_r, deadline, until_eof=False)
        if line is None:
            return Outcome(False, f"timed out after {limits.timeout_s:g} s")
        if not line.endswith(b"\n"):
            return Outcome(False, _ended(run, 0) if len(line) < MAX_REPLY else "answers over the size limit")
    try:
        reply = json.loads(line)
        values = plain_data.from_json({"tuple": reply["values"]})  # one budget for all the values
        stop = reply["stop"]
    except plain_data.NotPlain as err:
        return Outcome(False, f"a malformed answer ({err})")
    except (ValueError, KeyError, TypeError, RecursionError) as err:
        return Outcome(False, f"a malformed answer ({type(err).__name__})")
    if stop is not None or len(values) != len(split.calls):
        return Outcome(False, _stop_reason(str(stop)))
    failed = split.verdict(values)
    return Outcome(True, None) if failed is None else Outcome(False, f"tests failed: assert {failed}"[:300])


def _judged_verdict(source: str, problem: Mapping[str, Any], limits: Limits, sandboxed: bool) -> Outcome:
    deadline = time.monotonic() + limits.timeout_s
    tests = f"{problem['prompt']}\n\n{problem['test']}\n"
    with _Run(sandboxed) as run:
        calls_r, calls_w = run.pipe()
        answers_r, answers_w = run.pipe()
        report_r, report_w = run.pipe()
        run.start("sandbox_child.py", source, problem["entry_point"], limits, (calls_r, answers_w))
        run.start("judge_child.py", tests, problem["entry_point"], limits, (calls_w, answers_r, report_w))
        run.close(calls_r, answers_w, calls_w, answers_r, report_w)
        report = _exchange(None, b"", report_r, deadline, until_eof=True)
        if report is None:
            return Outcome(False, f"timed out after {limits.timeout_s:g} s")
        if not report:
            return Outcome(False, "the judge ended without a verdict: " + _ended(run, 1))
    try:
        verdict = json.loads(report)
        passed, reason = verdict["passed"] is True, verdict["reason"]
    except (ValueError, KeyError, TypeError):
        return Outcome(False, "the judge's report is malformed")
    return Outcome(True, None) if passed else Outcome(False, _stop_reason(str(reason)))


def candidate_source(code: str, problem: Mapping[str, Any]) -> str:
    """What the candidate's process runs: the prompt, then the completion (a whole redefined function
    replaces the prompt's, since it comes later). Never the tests."""
    return f"{problem['prompt']}{code}\n"


def verdict(code: str, problem: Mapping[str, Any], limits: Limits, sandboxed: bool) -> Outcome:
    split = humaneval_split.split(problem["test"], problem["entry_point"])
    source = candidate_source(code, problem)
    if split is not None:
        return _split_verdict(source, problem, split, limits, sandboxed)
    return _judged_verdict(source, problem, limits, sandboxed)


def job_cores() -> int:
    """The cores this process may run on (a job's share under Snakemake or SLURM)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def verdicts(codes: Sequence[str], problems: Sequence[Mapping[str, Any]], *, timeout_s: float, memory_mb: int,
             workers: int | None = None, unsandboxed_ok: bool = False) -> list[Outcome]:
    """verdict over many completions, `workers` at a time (default: the job's cores), in order. Raises
    sandbox.SandboxUnavailable where the OS sandbox cannot run and unsandboxed_ok is not set."""
    sandboxed = sandbox.require(unsandboxed_ok)
    limits = Limits(timeout_s, memory_mb)
    with ThreadPoolExecutor(max_workers=workers or job_cores()) as pool:
        return list(pool.map(lambda pair: verdict(*pair, limits, sandboxed), zip(codes, problems)))
