"""The start lock: engine starts on one physical device take turns (engines side by side, and a TP engine
over several GPUs), because vLLM's memory profiling of a starting engine must not see another's start.

A resident server takes it itself, after importing its engine's libraries and before building the
engine, and lets go once the engine is built. The imports (torch, vLLM, transformers: ~17-20 s of a
35 s SmolLM2 start on an H200 host, bench/peers/README.md) touch no device memory, so a waiting
engine does them while the one before it builds, and only the build (~15 s there) takes turns.

The server writes its phase beside its socket (<device>.starting: "waiting", then "loading"), so that
the job that launched it can tell waiting for another engine's start, which may take as long as that
start, from its own load, which its start timeout bounds (client.py)."""
from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from pathlib import Path

from randopt.io import write_text_atomic
from randopt.runtime.resident.identity import physical_devices

log = logging.getLogger("randopt")

WAITING, LOADING = "waiting", "loading"


def phase_path(directory: Path, device: str) -> Path:
    return Path(directory) / f"{device}.starting"


def read_phase(directory: Path, device: str) -> str | None:
    """The starting server's phase (WAITING or LOADING), or None before it wrote one."""
    try:
        return phase_path(directory, device).read_text().strip() or None
    except FileNotFoundError:
        return None


def clear_phase(directory: Path, device: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        phase_path(directory, device).unlink()


@contextlib.contextmanager
def start_lock(directory: Path, device: str, take: bool = True):
    """Held while this process builds an engine on `device`'s physical devices (all of them, taken in
    sorted order, so two starts never wait on each other); writes the phase file as it goes. take=False:
    an engine that may build beside others (a vLLM engine with a fixed KV cache, VllmEngine.start_alongside)
    only writes its phase."""
    directory, fds = Path(directory), []
    try:
        for physical in physical_devices(device) if take else []:
            fd = os.open(directory / f"start-{physical}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            fds.append(fd)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                write_text_atomic(phase_path(directory, device), WAITING)
                log.info("waiting for another engine's start on %s", physical)
                fcntl.flock(fd, fcntl.LOCK_EX)
        write_text_atomic(phase_path(directory, device), LOADING)
        yield
    finally:
        for fd in fds:  # closing the descriptor lets go (a killed process's too)
            os.close(fd)
