"""A resident server's process and the processes it started (vLLM's engine core and workers, in its
process group): whether they run, and stopping them all before another engine takes their GPU."""
from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from pathlib import Path

from randopt.io import process_alive
from randopt.runtime.resident.protocol import ResidentEngineError

log = logging.getLogger("randopt")


def terminate(pid: int, why: str, timeout: float = 60.0) -> None:
    """Stop a server and every process it started (it leads its own session, so vLLM's engine core and
    workers share its process group), and wait until all are gone, so their memory (a GPU's) is free
    for the next one: SIGTERM (the server closes its engine and exits), then SIGKILL."""
    log.info("resident engine: stopping pid %d (%s)", pid, why)
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 30.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)
        deadline = time.monotonic() + wait
        while group_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not group_alive(pid):
            return
    raise ResidentEngineError(f"the resident engine pid {pid} (or a process it started) survived SIGKILL; stop it by "
                              "hand and rerun")


def group_alive(pgid: int) -> bool:
    """Whether a process of this process group runs (zombies count as gone)."""
    if not Path("/proc").is_dir():  # no procfs (macOS, where no vLLM runs): the leader stands for its group
        return process_alive(pgid)
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()  # state, ppid, pgrp, ...
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            return True
    return False


def alive(pid: int) -> bool:
    """Whether pid runs; a zombie (exited, not yet reaped by a parent that lives on, such as a test
    process that started the server) counts as gone."""
    if not Path("/proc").is_dir():  # no procfs (macOS): signal 0 says whether it exists
        return process_alive(pid)
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def log_tail(path: Path, lines: int = 30) -> str:
    with contextlib.suppress(OSError):
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    return ""


def server_pid(directory: Path, device: str) -> int | None:
    """The pid of this device's resident server if it, or a process it started, still runs (loading,
    serving or stopping), from the pid file its job wrote; None if there is none."""
    with contextlib.suppress(OSError, ValueError):
        pid = int((directory / f"{device}.pid").read_text())
        if alive(pid):
            # the pid may have been reused by another program (no procfs: trust it)
            cmdline = Path(f"/proc/{pid}/cmdline")
            return pid if not Path("/proc").is_dir() or b"randopt.runtime.resident" in cmdline.read_bytes() else None
        # the server is gone; processes it started (vLLM's) may still hold the GPU: its group id is
        # not given to another process while one of them lives
        return pid if group_alive(pid) else None
    return None
