"""The CUDA MPS control daemon of one run folder (engine.cuda_mps; randopt/runtime/cuda_mps.py says when):
started at the run's start, used by its engine jobs, stopped at its end.

One daemon per run folder, private to this user, so it neither needs root nor meets another user's or
another run's daemon: its logs and our pid files in .snakemake/mps/ (log/ is CUDA_MPS_LOG_DIRECTORY), its
sockets (CUDA_MPS_PIPE_DIRECTORY) in a folder of the temp dir named after the run folder, since a socket's
path must fit in ~100 bytes and a run folder's .snakemake/ often does not. It runs in the foreground (`nvidia-cuda-mps-control -f`) under a watcher process
of ours (`python -m randopt.runtime.mps_daemon watch`, its own session), which owns its lifetime:
- the run's end (the Snakefile's onsuccess/onerror, after the resident engines, which are its clients)
  stops the watcher, which asks the daemon to quit and waits for it;
- a killed run leaves the watcher to see that the run's process is gone; it then waits until no
  resident engine of the run is left (they are MPS clients; they exit after keep_loaded_s idle) and
  quits the daemon itself, so no daemon outlives its run by more than that;
- a new run in the same folder adopts a watcher that is still up (a killed run's, with resident
  engines that are its clients) rather than start a second daemon under them.

An engine job (--cuda-mps-dir) checks that the daemon answers and puts the two folders into its
environment before CUDA starts, so its engine (and a resident server it starts) is an MPS client. The
daemon serves one control connection at a time, so randopt's control commands take turns (control.lock). A
daemon that is not up is an error that says why and what to do: CUDA itself would silently run the
engine without MPS. Which engines share the GPU never changes an answer (identical answers measured:
bench/engines_per_gpu/README.md), so none of this is in a key.
"""
from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import logging
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from randopt.checkout import python_path
from randopt.io import write_text_atomic
from randopt.runtime.cuda_mps import CONTROL, PIPE_ENV
from randopt.runtime.resident.processes import alive, group_alive, log_tail, server_pid, terminate
from randopt.runtime.resident.protocol import MAX_SOCKET_PATH

log = logging.getLogger("randopt")

DEFAULT_DIR = ".snakemake/mps"
LOG_ENV = "CUDA_MPS_LOG_DIRECTORY"
# The daemon's sockets are named pipes in pipe/: their names must fit AF_UNIX's limit with room to spare.
_PIPE_NAME_ROOM = 24


class MpsDaemonError(RuntimeError):
    """The run's MPS daemon cannot be started, or is not up for a job that needs it (one clear line)."""


def pipe_dir(directory: str | Path) -> Path:
    """The daemon's socket folder for a run folder's daemon: short, this user's, one per run folder."""
    tag = hashlib.sha1(str(Path(directory).resolve()).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"randopt-mps-{os.getuid()}-{tag}"


def daemon_env(directory: str | Path) -> dict:
    """The environment that makes a CUDA process a client of this folder's daemon."""
    return {PIPE_ENV: str(pipe_dir(directory)), LOG_ENV: str(Path(directory).resolve() / "log")}


def _control(directory: str | Path, binary: str, command: str, env: dict,
             timeout: float = 30.0) -> subprocess.CompletedProcess:
    """One command to the folder's daemon through the control program (`echo CMD | nvidia-cuda-mps-control`),
    one at a time: the daemon serves one control connection at a time and closes, unanswered, one that comes
    while it serves another. On the H100 (2026-12-07) two of a racing round's three engine jobs asked in the
    same millisecond; one got no answer and the run failed, twice in two tries."""
    fd = os.open(Path(directory) / "control.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        return subprocess.run([binary], input=command + "\n", env=env, capture_output=True, text=True,
                              timeout=timeout)
    finally:
        os.close(fd)


def answers(directory: str | Path, binary: str = CONTROL, retries: tuple[float, ...] = (0.5, 1.0)) -> bool:
    """Whether this folder's daemon answers a control command (get_server_list). An unanswered command is
    asked again after each of `retries` seconds: the lock keeps randopt's own commands apart, not those
    of a person or another tool talking to the same daemon."""
    for wait in (0.0, *retries):
        time.sleep(wait)
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            if _control(directory, binary, "get_server_list", os.environ | daemon_env(directory), 15.0).returncode == 0:
                return True
    return False


def watcher_pid(directory: str | Path) -> int | None:
    """The pid of this folder's watcher if it runs, else None."""
    with contextlib.suppress(OSError, ValueError):
        pid = int((Path(directory) / "watch.pid").read_text())
        cmdline = Path(f"/proc/{pid}/cmdline")
        if alive(pid) and (not Path("/proc").is_dir() or b"randopt.runtime.mps_daemon" in cmdline.read_bytes()):
            return pid
    return None


def _private_dir(directory: str | Path) -> Path:
    d = Path(directory).resolve()
    for sub in (d, d / "log"):
        sub.mkdir(parents=True, exist_ok=True)
        os.chmod(sub, 0o700)
    pipe = pipe_dir(d)
    if len(os.fsencode(str(pipe))) > MAX_SOCKET_PATH - _PIPE_NAME_ROOM:
        raise MpsDaemonError(f"the CUDA MPS pipe folder {pipe} is too long for the daemon's sockets (at most "
                             f"{MAX_SOCKET_PATH - _PIPE_NAME_ROOM} bytes); set TMPDIR to a shorter folder, or set "
                             f"engine.cuda_mps: false")
    with contextlib.suppress(FileExistsError):
        pipe.mkdir(mode=0o700)
    info = pipe.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise MpsDaemonError(f"the CUDA MPS pipe folder {pipe} is not a private folder of this user's; remove it and "
                             f"rerun, or set engine.cuda_mps: false")
    return d


@contextlib.contextmanager
def _lock(d: Path):
    fd = os.open(d / "start.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def start(directory: str | Path = DEFAULT_DIR, *, run_pid: int, resident_dir: str | Path, binary: str = CONTROL,
          timeout: float = 60.0) -> int:
    """The folder's daemon for the run whose process is run_pid (the Snakemake process): a watcher still
    up is adopted, else one is started; returns once the daemon answers. The watcher's pid."""
    d = _private_dir(directory)
    with _lock(d):
        write_text_atomic(d / "run.pid", str(run_pid))   # the watcher reads it at every look: adoption
        pid = watcher_pid(d)
        if pid is not None and answers(d, binary):
            log.info("CUDA MPS: the daemon of %s is up already (watcher pid %d): the run adopts it", d, pid)
            return pid
        if pid is not None:
            terminate(pid, "its MPS daemon does not answer")
        with open(d / "watch.log", "ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "randopt.runtime.mps_daemon", "watch", "--dir", str(d), "--resident-dir",
                 str(Path(resident_dir).resolve()), "--binary", binary],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                env=os.environ | {"PYTHONPATH": python_path(os.environ)})
        write_text_atomic(d / "watch.pid", str(proc.pid))
        deadline = time.monotonic() + timeout
        while not answers(d, binary, retries=()):   # this loop asks again itself, every 0.2 s
            if proc.poll() is not None or time.monotonic() > deadline:
                if group_alive(proc.pid):
                    terminate(proc.pid, "its MPS daemon did not come up")
                raise MpsDaemonError(f"the CUDA MPS daemon did not come up ({'exited' if proc.poll() is not None else f'no answer in {timeout:g} s'}); "
                                     f"set engine.cuda_mps: false to run without it. The end of {d / 'watch.log'}:\n"
                                     f"{log_tail(d / 'watch.log')}\n{log_tail(d / 'log' / 'control.log')}")
            time.sleep(0.2)
        log.info("CUDA MPS: daemon up for this run (watcher pid %d; %s=%s)", proc.pid, PIPE_ENV, pipe_dir(d))
        return proc.pid


def stop(directory: str | Path = DEFAULT_DIR, timeout: float = 90.0) -> bool:
    """Stop the folder's daemon (its watcher asks it to quit and waits); whether one was running. Never
    raises (the Snakefile's onsuccess/onerror call it)."""
    pid = watcher_pid(directory)
    if pid is None:
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while group_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if group_alive(pid):
        try:
            terminate(pid, f"its MPS daemon did not quit within {timeout:g} s", 10.0)
        except Exception as err:  # noqa: BLE001 - the run's end must go on
            log.warning("%s", err)
    return True


def client_env(directory: str | Path, binary: str = CONTROL) -> dict:
    """For an engine job, before CUDA starts: the environment of a client of the run's daemon. Raises
    MpsDaemonError when it does not answer (CUDA would then run the engine without MPS, unseen)."""
    if watcher_pid(directory) is None or not answers(directory, binary):
        raise MpsDaemonError(f"the run's CUDA MPS daemon ({Path(directory).resolve()}) is not up: it starts with the "
                             f"run (the Snakefile's onstart; --no-hooks skips it) and stops at its end. Rerun the "
                             f"workflow without --no-hooks, or set engine.cuda_mps: false. Its log: "
                             f"{Path(directory).resolve() / 'watch.log'}")
    return daemon_env(directory)


def _resident_left(resident_dir: Path) -> bool:
    return any(server_pid(resident_dir, p.stem) for p in resident_dir.glob("*.pid")) if resident_dir.is_dir() else False


def _run_alive(d: Path) -> bool:
    with contextlib.suppress(OSError, ValueError):
        return alive(int((d / "run.pid").read_text()))
    return False


def watch(directory: str | Path, resident_dir: str | Path, binary: str, poll: float = 1.0) -> int:
    """The watcher: run the daemon in the foreground until asked to stop (SIGTERM), or until the run's
    process is gone and no resident engine of it is left; then ask the daemon to quit and wait for it."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s mps-watch %(message)s", stream=sys.stderr)
    d, resident_dir = Path(directory), Path(resident_dir)
    env = os.environ | daemon_env(d)
    why: list[str] = []
    # before the daemon starts: a stop that came in between would kill the watcher and orphan the daemon
    signal.signal(signal.SIGTERM, lambda *_: why.append("asked to stop (the run ended)"))
    daemon = subprocess.Popen([binary, "-f"], env=env, stdin=subprocess.DEVNULL)
    log.info("pid %d: %s -f is pid %d (%s=%s)", os.getpid(), binary, daemon.pid, PIPE_ENV, env[PIPE_ENV])
    while not why:
        if daemon.poll() is not None:
            log.info("the daemon exited (%s) by itself", daemon.returncode)
            return 1
        if not _run_alive(d) and not _resident_left(resident_dir):
            why.append("the run's process is gone and none of its resident engines is left")
            break
        time.sleep(poll)
    log.info("stopping: %s", why[0])
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        _control(d, binary, "quit", env)
    try:
        daemon.wait(60.0)
    except subprocess.TimeoutExpired:
        log.info("the daemon did not quit within 60 s: killing it")
        daemon.kill()
        daemon.wait()
    log.info("the daemon is gone (%s)", daemon.returncode)
    shutil.rmtree(pipe_dir(d), ignore_errors=True)   # ours alone (private, named after the run folder)
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m randopt.runtime.mps_daemon", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    w = sub.add_parser("watch", help="run the daemon under a watcher (the run starts it; not for direct use)")
    w.add_argument("--dir", required=True)
    w.add_argument("--resident-dir", required=True)
    w.add_argument("--binary", default=CONTROL)
    s = sub.add_parser("stop", help="stop a run folder's MPS daemon by hand")
    s.add_argument("directory", nargs="?", default=DEFAULT_DIR)
    args = p.parse_args(argv)
    if args.command == "watch":
        return watch(args.dir, args.resident_dir, args.binary)
    print(("stopped the MPS daemon of " if stop(args.directory) else "no MPS daemon runs in ") + args.directory)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
