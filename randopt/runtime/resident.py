"""Resident engines: one loaded engine per device serves a local run's engine jobs in turn.

Every engine stage is its own Snakemake job, and a job that loads its own engine pays the start each
time: seconds for the torch engine, about 48 s for vLLM with SmolLM2 on an H200, minutes at 72B. A
full search pays it once per shard, racing once per round. With resident engines (engine.keep_loaded_s
> 0, local runs only) the first engine job on a device starts a server process that loads the engine
and listens on a Unix socket (.snakemake/engines/<device>.sock); later jobs on that device connect and
drive it through the same Engine protocol (randopt/engines/base.py). The run's end (the Snakefile's
onsuccess/onerror) stops the servers; a server left alone (the run killed) exits after keep_loaded_s
idle seconds.

Why results cannot change: a server is reused only by a job whose engine would be the same (the key:
engine kind and options, model files, visible GPUs, numerics environment, engine code), and a member's
weights are rebuilt from the resident base copy at every switch (the reconstruct switch), so they do
not depend on which members the engine served before. The delta switch's weights do depend on its
walk, so under it every job loads its own engine. tests/test_resident.py compares tables made both
ways. This module is therefore outside randopt/engines/ and its code key: a change to how engines are
kept does not rerun what they computed.

Safety: one client at a time (a second waits for the first to disconnect); a job killed mid-call
leaves the server to finish the call and wait for the next job; an engine error that is not a bad
input stops the server, so the next job starts a fresh engine. One engine per GPU: a server on GPUs
that a new one needs (another device name, e.g. after a killed run under another tensor-parallel
size) is stopped first. Servers are stopped by signal to their process group (they lead their own
session, so vLLM's engine core and workers go too), loading, idle or busy alike, and a job waits
until the whole group is gone before it starts another. The socket folder is private (0700) and
connections are authenticated with a key file only this user can read.
"""
from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import logging
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
import traceback
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client, Listener
from pathlib import Path

from randopt.io import InputError, canonical_json, process_alive, write_text_atomic

log = logging.getLogger("randopt")

DEFAULT_DIR = ".snakemake/engines"
# The Engine protocol's methods, the only ones a client may call.
METHODS = ("set_weights", "restore_base", "chat_prompt", "generate", "token_logprobs", "perturbable_names",
           "read_weights")
# Errors that mean a bad input, not a broken engine: the server reports them and keeps serving.
INPUT_ERRORS = {"InputError": InputError, "ValueError": ValueError, "FileNotFoundError": FileNotFoundError}
# Environment variables that can change an engine's numbers or devices: part of the key.
ENV_PREFIXES = ("CUDA_", "ONEDNN_", "DNNL_", "ATEN_", "OMP_", "KMP_", "GOMP_", "MKL_", "OPENBLAS_", "TORCH",
                "PYTORCH_", "TRITON_", "VLLM_", "NCCL_", "NVIDIA_", "CUBLAS_", "HF_", "TRANSFORMERS_", "LD_")
# Packages whose version changes what an engine computes: part of the key.
PACKAGES = ("torch", "transformers", "vllm", "triton", "safetensors")
# An AF_UNIX socket path must fit in 108 bytes (104 on macOS).
MAX_SOCKET_PATH = 100


class ResidentEngineError(RuntimeError):
    """The server failed (its log says why); the job fails, the next job starts a fresh server."""


# ------------------------------------------------------------------------------------------- keys

def device_name() -> str:
    """The device a job's engine runs on, as a file name: gpu<ids> for the GPUs this job may see
    (randopt/runtime/gpu_slots.py set CUDA_VISIBLE_DEVICES to its claim; ids that are no plain numbers, such as
    UUIDs, as gpu-<hash>), else cpu (CUDA_VISIBLE_DEVICES unset: the CPU, or every GPU)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").replace(" ", "").strip(",")
    if not visible:
        return "cpu"
    ids = visible.split(",")
    if all(i.isdigit() for i in ids):
        return "gpu" + "-".join(ids)
    return "gpu-" + hashlib.sha1(visible.encode()).hexdigest()[:12]


def _gpu_ids(device: str) -> set[str] | None:
    """The GPU ids a device name covers; None: possibly every GPU (cpu, or ids given as UUIDs)."""
    if device == "cpu" or device.startswith("gpu-"):
        return None
    return set(device.removeprefix("gpu").split("-"))


def overlaps(device: str, other: str) -> bool:
    """Whether two devices may share a GPU (then only one of them may hold a resident engine)."""
    a, b = _gpu_ids(device), _gpu_ids(other)
    return a is None or b is None or bool(a & b)


def _versions() -> dict:
    from importlib import metadata
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def engine_key(kind: str, model_dir: str, options: dict) -> str:
    """What decides the engine a job would load: a server with another key is never reused."""
    from randopt.code_keys import modules_version

    model = Path(model_dir).resolve()
    files = sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in model.iterdir() if p.is_file()) \
        if model.is_dir() else []
    env = {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIXES)}
    spec = {"kind": kind, "model": str(model), "files": files, "options": options, "env": env,
            "python": sys.executable, "packages": _versions(), "code": modules_version("randopt.engines")}
    return hashlib.sha256(canonical_json(spec).encode()).hexdigest()[:16]


def uses_resident(options: dict) -> tuple[bool, str]:
    """(whether this engine may be resident, why not): only the reconstruct switch's weights are
    independent of the members served before."""
    if options.get("switch", "reconstruct") != "reconstruct":
        return False, "perturbation.switch delta: its weights depend on the walk, so each job loads its own engine"
    return True, ""


# ------------------------------------------------------------------------------------------ client

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

    def set_weights(self, seed: int, sigma: float) -> None:
        self._call("set_weights", int(seed), float(sigma))

    def restore_base(self) -> None:
        self._call("restore_base")

    def chat_prompt(self, user_message, system=None, examples=()):
        return self._call("chat_prompt", user_message, system, list(examples))

    def generate(self, prompts, max_tokens, stop):
        return self._call("generate", list(prompts), int(max_tokens), list(stop))

    def token_logprobs(self, texts):
        return self._call("token_logprobs", list(texts))

    def perturbable_names(self):
        return self._call("perturbable_names")

    def read_weights(self):
        return self._call("read_weights")

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
        tmp = directory / f".authkey.{os.getpid()}"
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
                                  f"replaced while it ran): stop it with `python -m randopt.runtime.resident stop "
                                  f"{Path(address).parent}` and rerun") from None
    try:
        conn.send(("hello",))
        return conn, conn.recv()[1]
    except (EOFError, OSError):  # it exited between accept and reply (idle timeout)
        conn.close()
        return None


def _terminate(pid: int, why: str, timeout: float = 60.0) -> None:
    """Stop a server and every process it started (it leads its own session, so vLLM's engine core and
    workers share its process group), and wait until all are gone, so their memory (a GPU's) is free
    for the next one: SIGTERM (the server closes its engine and exits), then SIGKILL."""
    log.info("resident engine: stopping pid %d (%s)", pid, why)
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 30.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)
        deadline = time.monotonic() + wait
        while _group_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not _group_alive(pid):
            return
    raise ResidentEngineError(f"the resident engine pid {pid} (or a process it started) survived SIGKILL; stop it by "
                              "hand and rerun")


def _group_alive(pgid: int) -> bool:
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


def _alive(pid: int) -> bool:
    """Whether pid runs; a zombie (exited, not yet reaped by a parent that lives on, such as a test
    process that started the server) counts as gone."""
    if not Path("/proc").is_dir():  # no procfs (macOS): signal 0 says whether it exists
        return process_alive(pid)
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _tail(path: Path, lines: int = 30) -> str:
    with contextlib.suppress(OSError):
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    return ""


def _server_pid(directory: Path, device: str) -> int | None:
    """The pid of this device's resident server if it, or a process it started, still runs (loading,
    serving or stopping), from the pid file its job wrote; None if there is none."""
    with contextlib.suppress(OSError, ValueError):
        pid = int((directory / f"{device}.pid").read_text())
        if _alive(pid):
            # the pid may have been reused by another program (no procfs: trust it)
            cmdline = Path(f"/proc/{pid}/cmdline")
            return pid if not Path("/proc").is_dir() or b"randopt.runtime.resident" in cmdline.read_bytes() else None
        # the server is gone; processes it started (vLLM's) may still hold the GPU: its group id is
        # not given to another process while one of them lives
        return pid if _group_alive(pid) else None
    return None


def connect(kind: str, model_dir: str, options: dict, directory: str | Path = DEFAULT_DIR,
            keep_loaded_s: float = 300.0, start_timeout_s: float = 3600.0) -> ResidentEngine:
    """The resident engine for this job's device and engine, started if there is none (or one with
    another key, which is stopped first)."""
    if keep_loaded_s <= 0:
        raise InputError(f"keep_loaded_s must be > 0 for a resident engine, got {keep_loaded_s!r}")
    directory = _private_dir(directory)
    device, key = device_name(), engine_key(kind, model_dir, options)
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
            if other != device and overlaps(device, other) and (pid := _server_pid(directory, other)):
                _terminate(pid, f"it holds {other}, which shares GPUs with {device}")
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
                _terminate(info["pid"], f"it holds another engine on {device}")
                continue
            # No answer: none runs, or one is still loading (its job was killed while waiting) or
            # stopping (idle). Wait for it to answer or to be gone, so two never share a device.
            pid = _server_pid(directory, device)
            if pid is None:
                break
            if time.monotonic() > deadline:
                raise ResidentEngineError(f"the resident engine pid {pid} on {device} neither answered nor exited "
                                          f"within {start_timeout_s:.0f} s; stop it (kill {pid}) and rerun. Its log: "
                                          f"{log_path}")
            time.sleep(0.2)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(address)  # a dead server's socket
        return _start(kind, model_dir, options, key, address, authkey, log_path, keep_loaded_s, start_timeout_s)


OFF_HINT = "engine.keep_loaded_s: 0 loads an engine in each job instead"


def _start(kind, model_dir, options, key, address, authkey, log_path: Path, keep_loaded_s, start_timeout_s):
    start = time.perf_counter()
    with open(log_path, "ab") as log_file:
        log_file.write(f"\n--- {time.strftime('%Y-%m-%d %H:%M:%S')} starting a {kind} engine for {model_dir}\n".encode())
        log_file.flush()
        # Its own session: stopping the job (Snakemake kills a job's process group) leaves the server
        # for the next job; the run's end or the idle timeout stops it.
        proc = subprocess.Popen(
            [sys.executable, "-m", "randopt.runtime.resident", "serve", "--address", address, "--kind", kind,
             "--model-dir", str(model_dir), "--options", json.dumps(options), "--key", key,
             "--keep-loaded-s", str(keep_loaded_s)],
            stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True,
            env=os.environ | {"PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[1]),
                                                                         os.environ.get("PYTHONPATH")]))})
    # Written here, under the device lock: a job that comes while it loads waits for it.
    write_text_atomic(Path(address).with_suffix(".pid"), str(proc.pid))
    log.info("resident engine: started pid %d on %s (log %s)", proc.pid, device_name(), log_path)
    while True:
        if proc.poll() is not None:
            if _group_alive(proc.pid):
                _terminate(proc.pid, "it failed to start")
            raise ResidentEngineError(f"the resident engine exited ({proc.returncode}) before it was ready ({OFF_HINT}); "
                                      f"the end of its log {log_path}:\n{_tail(log_path)}")
        found = _hello(address, authkey)
        if found is not None:
            conn, info = found
            if info["key"] != key:  # cannot happen under the device lock; say so if it does
                raise ResidentEngineError(f"another resident engine answered at {address}")
            log.info("resident engine: ready in %.1f s", time.perf_counter() - start)
            return ResidentEngine(conn, info, False, log_path)
        if time.perf_counter() - start > start_timeout_s:
            _terminate(proc.pid, f"not ready within {start_timeout_s:.0f} s")
            raise ResidentEngineError(f"the resident engine was not ready within {start_timeout_s:.0f} s ({OFF_HINT}); "
                                      f"the end of its log {log_path}:\n{_tail(log_path)}")
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
        pid = _server_pid(directory, pid_file.stem)
        try:
            if pid is not None:
                _terminate(pid, "the run ended", timeout)
                stopped += 1
        except ResidentEngineError as err:
            log.warning("%s", err)
            continue
        for stale in (pid_file, pid_file.with_suffix(".sock")):
            with contextlib.suppress(FileNotFoundError):
                stale.unlink()
    return stopped


# ------------------------------------------------------------------------------------------ server

def serve(*, address: str, kind: str, model_dir: str, options: dict, key: str, keep_loaded_s: float) -> None:
    """Load the engine, then answer jobs one at a time until asked to stop or idle for keep_loaded_s."""
    from randopt.engines.factory import make_engine

    logging.basicConfig(level=logging.INFO, format="%(asctime)s resident %(levelname)s %(message)s",
                        stream=sys.stderr)
    start = time.perf_counter()
    engine = make_engine(kind, model_dir, **options)
    dtype = getattr(engine, "compute_dtype", None)
    info = {"pid": os.getpid(), "key": key, "load_s": time.perf_counter() - start,
            "compute_dtype": str(dtype) if dtype is not None else None,
            "compute_dtype_reason": getattr(engine, "compute_dtype_reason", None)}
    authkey = Path(address).with_name("authkey").read_bytes()
    listener = Listener(address, family="AF_UNIX", authkey=authkey)  # bound only now: ready = connectable
    socket_inode = os.stat(address).st_ino
    log.info("pid %d serving a %s engine at %s (loaded in %.1f s)", os.getpid(), kind, address, info["load_s"])
    busy, last = threading.Lock(), [time.monotonic()]

    def finish(why: str) -> None:
        log.info("stopping: %s", why)
        # Remove our socket, never a successor's (looked up by name). The pid file stays: a job checks
        # whether the pid still runs, and vLLM's processes may outlive this one for a moment.
        with contextlib.suppress(OSError):
            if os.stat(address).st_ino == socket_inode:
                os.unlink(address)
        with contextlib.suppress(Exception):
            engine.close()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)  # vLLM's exit-time finalizers were seen to abort (randopt/runtime/cli.py)

    def idle_watch() -> None:
        while True:
            time.sleep(1.0)
            with busy:
                if time.monotonic() - last[0] > keep_loaded_s:
                    finish(f"idle for {keep_loaded_s:g} s")

    signal.signal(signal.SIGTERM, lambda *_: finish("asked to stop (SIGTERM)"))
    threading.Thread(target=idle_watch, daemon=True).start()
    while True:
        try:
            conn = listener.accept()
        except Exception as err:  # a failed handshake (wrong key, a client that left): the next one
            log.warning("refused a connection: %r", err)
            continue
        with busy:
            stop = _serve_connection(conn, engine, info)
            last[0] = time.monotonic()
            if stop:
                finish(stop)


def _serve_connection(conn, engine, info: dict) -> str | None:
    """Answer one client until it disconnects; a reason to stop the server, or None."""
    try:
        while True:
            message = conn.recv()
            if message[0] == "hello":
                conn.send(("ok", info))
            elif message[0] == "call" and message[1] in METHODS:
                _, method, args = message
                try:
                    conn.send(("ok", getattr(engine, method)(*args)))
                except Exception as err:
                    name = type(err).__name__
                    conn.send(("error", name, str(err), traceback.format_exc()))
                    if name not in INPUT_ERRORS:
                        return f"{method} failed: {name}: {err}"
            else:
                conn.send(("error", "ValueError", f"unknown request {message[:2]!r}", ""))
    except (EOFError, OSError):  # the job finished or was killed: wait for the next one
        return None
    finally:
        conn.close()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m randopt.runtime.resident", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="run a server (jobs start it; not for direct use)")
    s.add_argument("--address", required=True)
    s.add_argument("--kind", required=True, choices=["torch", "vllm"])
    s.add_argument("--model-dir", required=True)
    s.add_argument("--options", required=True, type=json.loads)
    s.add_argument("--key", required=True)
    s.add_argument("--keep-loaded-s", required=True, type=float)
    t = sub.add_parser("stop", help="stop the resident engines of a run folder's .snakemake/engines")
    t.add_argument("directory", nargs="?", default=DEFAULT_DIR)
    args = p.parse_args(argv)
    if args.command == "serve":
        serve(address=args.address, kind=args.kind, model_dir=args.model_dir, options=args.options, key=args.key,
              keep_loaded_s=args.keep_loaded_s)
        return 0
    print(f"stopped {stop_all(args.directory)} resident engine(s) in {args.directory}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
