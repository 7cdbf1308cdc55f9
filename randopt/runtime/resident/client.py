"""A job's side: connect to this device's resident engine, starting one if there is none (or one
holding another engine, stopped first), and the handle that drives it through the Engine protocol;
stop_all, for the run's end."""
from __future__ import annotations

import contextlib
import datetime
import fcntl
import inspect
import json
import logging
import os
import secrets
import subprocess
import sys
import threading
import time
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client
from pathlib import Path

from randopt.checkout import python_path
from randopt.engines.base import Engine
from randopt.io import InputError, write_text_atomic
from randopt.runtime.gpu_slots import SLOT_ENV
from randopt.runtime.resident.identity import device_name, engine_key, overlaps
from randopt.runtime.resident.processes import group_alive, server_pid, log_tail, terminate
from randopt.runtime.resident.protocol import (DEFAULT_DIR, INPUT_ERRORS, MAX_SOCKET_PATH, METHODS, OFF_HINT,
                                               ResidentEngineError)
from randopt.runtime.resident.start_lock import WAITING, clear_phase, read_phase

log = logging.getLogger("randopt")


class ResidentEngine:
    """A job's handle on a resident server: the Engine protocol, each call a round trip."""

    drift = None  # reconstruct only (uses_resident): nothing drifts

    def __init__(self, conn, info: dict, reused: bool, log_path: Path):
        self._conn, self.reused, self.log_path = conn, reused, log_path
        self.pid = info["pid"]
        self.compute_dtype = info.get("compute_dtype")
        self.compute_dtype_reason = info.get("compute_dtype_reason")

    def _call(self, method: str, *args):
        try:
            self._conn.send(("call", method, args))
            reply = self._conn.recv()
        except (EOFError, OSError) as err:
            raise ResidentEngineError(f"the resident engine (pid {self.pid}) went away during {method} ({err!r}); "
                                      f"its log: {self.log_path}") from None
        if reply[0] == "ok":
            return reply[1]
        _, name, message, trace = reply
        if name in INPUT_ERRORS:
            raise INPUT_ERRORS[name](message)
        raise ResidentEngineError(f"the resident engine (pid {self.pid}) failed in {method}: {name}: {message}; it "
                                  f"stopped, and the next job starts a fresh one. Its log: {self.log_path}\n{trace}")

    def __getattr__(self, method: str):
        """The Engine protocol's methods (protocol.METHODS), each a round trip to the server."""
        if method not in METHODS:
            raise AttributeError(f"a resident engine has no method {method!r}; it serves {list(METHODS)}")
        signature = inspect.signature(getattr(Engine, method))

        def call(*args, **kwargs):
            # bound to the protocol's signature here, so a wrong call fails in the job, not the server
            bound = signature.bind(self, *args, **kwargs)
            bound.apply_defaults()
            return self._call(method, *list(bound.arguments.values())[1:])
        return call

    def close(self) -> None:
        """Disconnect; the server stays for the next job."""
        with contextlib.suppress(OSError):
            self._conn.close()


def _private_dir(directory: str | Path) -> Path:
    path = Path(directory)
    try:
        path.mkdir(parents=True, exist_ok=True)
        os.chmod(path, 0o700)
    except OSError as err:
        raise ResidentEngineError(f"cannot keep resident engines in {path} ({err}); it must be this user's: remove "
                                  f"it, or set engine.keep_loaded_s: 0 to load an engine in each job") from None
    return path


def _authkey(directory: Path) -> bytes:
    """The folder's connection key (created once, readable by this user only)."""
    path = directory / "authkey"
    if not path.exists():
        tmp = directory / f".authkey.{os.getpid()}.{threading.get_ident()}"   # a job's engines connect from threads
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(secrets.token_bytes(32))
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)  # the first writer wins; the others read its key
        tmp.unlink()
    return path.read_bytes()


@contextlib.contextmanager
def _device_lock(directory: Path, device: str):
    """Serializes connect-or-start among jobs of one device (on a CPU several jobs may race)."""
    fd = os.open(directory / f"{device}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _hello(address: str, authkey: bytes):
    """(connection, the server's info: pid, key, load_s, ...) from the server at address, or None when
    there is none (or it just left)."""
    try:
        conn = Client(address, family="AF_UNIX", authkey=authkey)
    except (OSError, EOFError):  # none listens, or it left during the handshake (idle timeout, a failure)
        return None
    except AuthenticationError:
        raise ResidentEngineError(f"the resident engine at {address} does not know this folder's key (its authkey was "
                                  f"replaced while it ran): stop it with `python -m randopt.runtime.resident.server stop "
                                  f"{Path(address).parent}` and rerun") from None
    try:
        conn.send(("hello",))
        return conn, conn.recv()[1]
    except (EOFError, OSError):  # it exited between accept and reply (idle timeout)
        conn.close()
        return None


def connect(kind: str, model_dir: str, options: dict, directory: str | Path = DEFAULT_DIR,
            keep_loaded_s: float = 300.0, start_timeout_s: float = 3600.0, slot: str | None = None) -> ResidentEngine:
    """The resident engine for this job's device and engine, started if there is none (or one with
    another key, which is stopped first). slot ("<s>of<E>"): one of this process's own engines side by side
    on its device (job_engines.py), instead of the engine slot the job claimed."""
    if keep_loaded_s <= 0:
        raise InputError(f"keep_loaded_s must be > 0 for a resident engine, got {keep_loaded_s!r}")
    directory = _private_dir(directory)
    device, key = device_name(slot), engine_key(kind, model_dir, options)
    address, log_path = str(directory / f"{device}.sock"), directory / f"{device}.log"
    if len(os.fsencode(address)) > MAX_SOCKET_PATH:
        raise ResidentEngineError(f"the resident engine's socket path {address} is longer than a Unix socket allows "
                                  f"({MAX_SOCKET_PATH} bytes); run from a shorter folder, or set engine.keep_loaded_s: 0")
    authkey = _authkey(directory)
    with _device_lock(directory, device):
        # One engine per GPU: a server of another device name on the same GPUs (a killed run's, one
        # under another tensor_parallel_size) would leave this one no memory. Jobs on overlapping
        # GPUs never run at once (randopt/runtime/gpu_slots.py), so such a server serves nobody now.
        for pid_file in directory.glob("*.pid"):
            other = pid_file.stem
            if other != device and overlaps(device, other) and (pid := server_pid(directory, other)):
                terminate(pid, f"it holds {other}, which shares GPUs with {device}")
        deadline = time.monotonic() + start_timeout_s
        while True:
            found = _hello(address, authkey)
            if found is not None:
                conn, info = found
                if info["key"] == key:
                    log.info("resident engine: reusing pid %d on %s (loaded in %.1f s; log %s)", info["pid"],
                             device, info["load_s"], log_path)
                    return ResidentEngine(conn, info, True, log_path)
                conn.close()
                terminate(info["pid"], f"it holds another engine on {device}")
                continue
            # No answer: none runs, or one is still loading (its job was killed while waiting) or
            # stopping (idle). Wait for it to answer or to be gone, so two never share a device.
            pid = server_pid(directory, device)
            if pid is None:
                break
            if time.monotonic() > deadline:
                raise ResidentEngineError(f"the resident engine pid {pid} on {device} neither answered nor exited "
                                          f"within {start_timeout_s:.0f} s; stop it (kill {pid}) and rerun. Its log: "
                                          f"{log_path}")
            time.sleep(0.2)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(address)  # a dead server's socket
        # No start lock here: the server takes it after its imports (start_lock.py)
        return _launch(kind, model_dir, options, key, address, authkey, log_path, keep_loaded_s, start_timeout_s,
                       device, slot)


def _launch(kind, model_dir, options, key, address, authkey, log_path: Path, keep_loaded_s, start_timeout_s,
            device: str, slot: str | None):
    directory = Path(address).parent
    clear_phase(directory, device)  # a phase a killed server left
    start = time.perf_counter()
    with open(log_path, "ab") as log_file:
        log_file.write(f"\n--- {datetime.datetime.now().isoformat(sep=' ', timespec='milliseconds')} starting a {kind} engine for {model_dir}\n".encode())
        log_file.flush()
        # Its own session: stopping the job (Snakemake kills a job's process group) leaves the server
        # for the next job; the run's end or the idle timeout stops it.
        proc = subprocess.Popen(
            [sys.executable, "-m", "randopt.runtime.resident.server", "serve", "--address", address, "--kind", kind,
             "--model-dir", str(model_dir), "--options", json.dumps(options), "--key", key,
             "--keep-loaded-s", str(keep_loaded_s)],
            stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True,
            env=os.environ | {"PYTHONPATH": python_path(os.environ)}
            | ({SLOT_ENV: slot} if slot else {}))   # the server names its device as this job does
    # Written here, under the device lock: a job that comes while it loads waits for it.
    write_text_atomic(Path(address).with_suffix(".pid"), str(proc.pid))
    log.info("resident engine: started pid %d on %s (log %s)", proc.pid, device, log_path)
    # The timeout bounds the server's own imports and build. While it waits for another engine's start on
    # its GPU (its phase file says so), the clock restarts: that start is bounded by its own job's timeout.
    clock, said_waiting = start, False
    while True:
        if read_phase(directory, device) == WAITING:
            if not said_waiting:
                said_waiting = True
                log.info("resident engine: waiting for another engine's start on %s", device)
            clock = time.perf_counter()
        if proc.poll() is not None:
            if group_alive(proc.pid):
                terminate(proc.pid, "it failed to start")
            raise ResidentEngineError(f"the resident engine exited ({proc.returncode}) before it was ready ({OFF_HINT}); "
                                      f"the end of its log {log_path}:\n{log_tail(log_path)}")
        found = _hello(address, authkey)
        if found is not None:
            conn, info = found
            if info["key"] != key:  # cannot happen under the device lock; say so if it does
                raise ResidentEngineError(f"another resident engine answered at {address}")
            log.info("resident engine: ready in %.1f s (%.1f s of it waiting for another engine's start)",
                     time.perf_counter() - start, info.get("start_wait_s", 0.0))
            return ResidentEngine(conn, info, False, log_path)
        if time.perf_counter() - clock > start_timeout_s:
            terminate(proc.pid, f"not ready within {start_timeout_s:.0f} s")
            raise ResidentEngineError(f"the resident engine was not ready within {start_timeout_s:.0f} s ({OFF_HINT}); "
                                      f"the end of its log {log_path}:\n{log_tail(log_path)}")
        time.sleep(0.2)


def stop_all(directory: str | Path = DEFAULT_DIR, timeout: float = 60.0) -> int:
    """Stop every resident engine in directory, loading, idle or busy (the run's end); returns how
    many were stopped. By signal, not by request, so a server busy with a killed job's call or still
    loading is stopped too; never raises (the Snakefile's onsuccess/onerror call it)."""
    directory = Path(directory)
    if not directory.is_dir():
        return 0
    stopped = 0
    for pid_file in sorted(directory.glob("*.pid")):
        pid = server_pid(directory, pid_file.stem)
        try:
            if pid is not None:
                terminate(pid, "the run ended", timeout)
                stopped += 1
        except ResidentEngineError as err:
            log.warning("%s", err)
            continue
        for stale in (pid_file, pid_file.with_suffix(".sock")):
            with contextlib.suppress(FileNotFoundError):
                stale.unlink()
    return stopped


def release(directory: str | Path = DEFAULT_DIR, timeout: float = 60.0) -> int:
    """Stop the resident engines on this job's GPUs (device_name(); every one when the job is on the CPU or
    sees all GPUs): for a GPU job that holds no resident engine but needs the memory they hold
    (distillation's fine-tune, its own engines on other models). Its claim makes them idle (its GPU
    slots, and every engine slot: rules/common.smk). Returns how many were stopped."""
    directory = Path(directory)
    if not directory.is_dir():
        return 0
    device, stopped = device_name(), 0
    for pid_file in sorted(directory.glob("*.pid")):
        other = pid_file.stem
        if overlaps(device, other) and (pid := server_pid(directory, other)) is not None:
            terminate(pid, f"a job on {device} needs the memory it holds", timeout)
            stopped += 1
    return stopped
