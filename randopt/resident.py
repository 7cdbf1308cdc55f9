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
input stops the server, so the next job starts a fresh engine. The socket folder is private (0700)
and connections are authenticated with a key file only this user can read.
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
from multiprocessing.connection import Client, Listener
from pathlib import Path

from randopt.io import InputError, canonical_json, write_text_atomic

log = logging.getLogger("randopt")

DEFAULT_DIR = ".snakemake/engines"
# The Engine protocol's methods, the only ones a client may call.
METHODS = ("set_weights", "restore_base", "chat_prompt", "generate", "token_logprobs", "perturbable_names",
           "read_weights")
# Errors that mean a bad input, not a broken engine: the server reports them and keeps serving.
INPUT_ERRORS = {"InputError": InputError, "ValueError": ValueError, "FileNotFoundError": FileNotFoundError}
# Environment variables that can change an engine's numbers or devices: part of the key.
ENV_PREFIXES = ("CUDA_", "ONEDNN_", "ATEN_", "OMP_", "MKL_", "TORCH", "PYTORCH_", "TRITON_", "VLLM_", "NCCL_",
                "HF_", "TRANSFORMERS_")


class ResidentEngineError(RuntimeError):
    """The server failed (its log says why); the job fails, the next job starts a fresh server."""


# ------------------------------------------------------------------------------------------- keys

def device_name() -> str:
    """The device a job's engine runs on, as a file name: gpu<ids> for the GPUs this job may see
    (randopt/gpu_slots.py set CUDA_VISIBLE_DEVICES to its claim), else cpu."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    return "gpu" + "-".join(visible.replace(" ", "").split(",")) if visible else "cpu"


def engine_key(kind: str, model_dir: str, options: dict) -> str:
    """What decides the engine a job would load: a server with another key is never reused."""
    from randopt.keys import code_version  # jsonschema etc.: only when resident engines are used

    model = Path(model_dir).resolve()
    files = sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in model.iterdir() if p.is_file()) \
        if model.is_dir() else []
    env = {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIXES)}
    spec = {"kind": kind, "model": str(model), "files": files, "options": options, "env": env,
            "python": sys.executable, "code": code_version("engine")}
    return hashlib.sha256(canonical_json(spec).encode()).hexdigest()[:16]


def uses_resident(kind: str, options: dict) -> tuple[bool, str]:
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
        self.load_s = info.get("load_s")

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
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o700)
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
    """(connection, reply) from the server at address, or None when there is none (or it just left)."""
    try:
        conn = Client(address, family="AF_UNIX", authkey=authkey)
    except (FileNotFoundError, ConnectionRefusedError):
        return None
    try:
        conn.send(("hello",))
        return conn, conn.recv()
    except (EOFError, OSError):  # it exited between accept and reply (idle timeout)
        conn.close()
        return None


def _stop(conn, info: dict, timeout: float = 600.0) -> None:
    """Ask a server to exit and wait until it has, so its memory (a GPU's) is free for the next one."""
    with contextlib.suppress(EOFError, OSError):
        conn.send(("shutdown",))
        conn.recv()
    conn.close()
    deadline = time.monotonic() + timeout
    while _alive(info["pid"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _alive(info["pid"]):
        raise ResidentEngineError(f"the resident engine (pid {info['pid']}) did not exit within {timeout:.0f} s "
                                  "of being asked to; stop it (kill) and rerun")


def _alive(pid: int) -> bool:
    """Whether pid runs; a zombie (exited, not yet reaped by a parent that lives on, such as a test
    process that started the server) counts as gone."""
    if not Path("/proc").is_dir():  # no procfs (macOS): signal 0 says whether it exists
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
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
    """The pid of a resident server of this device that is still running (starting, serving or
    stopping), from its pid file; None if there is none."""
    with contextlib.suppress(OSError, ValueError):
        pid = int((directory / f"{device}.pid").read_text())
        cmdline = Path(f"/proc/{pid}/cmdline")  # a reused pid is not ours (no procfs: trust the pid)
        if _alive(pid) and (not Path("/proc").is_dir() or b"randopt.resident" in cmdline.read_bytes()):
            return pid
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
    authkey = _authkey(directory)
    with _device_lock(directory, device):
        deadline = time.monotonic() + start_timeout_s
        while True:
            found = _hello(address, authkey)
            if found is not None:
                conn, (_, info) = found
                if info["key"] == key:
                    log.info("resident engine: reusing pid %d on %s (loaded in %.1f s; log %s)", info["pid"],
                             device, info["load_s"], log_path)
                    return ResidentEngine(conn, info, True, log_path)
                log.info("resident engine: pid %d on %s holds another engine; stopping it", info["pid"], device)
                _stop(conn, info)
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


def _start(kind, model_dir, options, key, address, authkey, log_path: Path, keep_loaded_s, start_timeout_s):
    start = time.perf_counter()
    with open(log_path, "ab") as log_file:
        log_file.write(f"\n--- {time.strftime('%Y-%m-%d %H:%M:%S')} starting a {kind} engine for {model_dir}\n".encode())
        log_file.flush()
        # Its own session: stopping the job (Snakemake kills a job's process group) leaves the server
        # for the next job; the run's end or the idle timeout stops it.
        proc = subprocess.Popen(
            [sys.executable, "-m", "randopt.resident", "serve", "--address", address, "--kind", kind,
             "--model-dir", str(model_dir), "--options", json.dumps(options), "--key", key,
             "--keep-loaded-s", str(keep_loaded_s)],
            stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True,
            env=os.environ | {"PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[1]),
                                                                         os.environ.get("PYTHONPATH")]))})
    log.info("resident engine: started pid %d on %s (log %s)", proc.pid, device_name(), log_path)
    while True:
        if proc.poll() is not None:
            raise ResidentEngineError(f"the resident engine exited ({proc.returncode}) before it was ready; the end "
                                      f"of its log {log_path}:\n{_tail(log_path)}")
        found = _hello(address, authkey)
        if found is not None:
            conn, (status, info) = found
            if info["key"] != key:  # cannot happen under the device lock; say so if it does
                raise ResidentEngineError(f"another resident engine answered at {address}")
            log.info("resident engine: ready in %.1f s", time.perf_counter() - start)
            return ResidentEngine(conn, info, False, log_path)
        if time.perf_counter() - start > start_timeout_s:
            proc.kill()
            raise ResidentEngineError(f"the resident engine was not ready within {start_timeout_s:.0f} s; the end "
                                      f"of its log {log_path}:\n{_tail(log_path)}")
        time.sleep(0.2)


def stop_all(directory: str | Path = DEFAULT_DIR, timeout: float = 600.0) -> int:
    """Stop every resident engine in directory (the run's end); returns how many were stopped."""
    directory = Path(directory)
    if not directory.is_dir():
        return 0
    authkey, stopped = (directory / "authkey").read_bytes() if (directory / "authkey").exists() else b"", 0
    for sock in sorted(directory.glob("*.sock")):
        found = _hello(str(sock), authkey) if authkey else None
        if found is None:
            with contextlib.suppress(FileNotFoundError):
                sock.unlink()
            continue
        conn, (_, info) = found
        _stop(conn, info, timeout)
        stopped += 1
    return stopped


# ------------------------------------------------------------------------------------------ server

def serve(*, address: str, kind: str, model_dir: str, options: dict, key: str, keep_loaded_s: float) -> None:
    """Load the engine, then answer jobs one at a time until asked to stop or idle for keep_loaded_s."""
    from randopt.engines import make_engine

    logging.basicConfig(level=logging.INFO, format="%(asctime)s resident %(levelname)s %(message)s",
                        stream=sys.stderr)
    pid_file = Path(address).with_suffix(".pid")
    write_text_atomic(pid_file, str(os.getpid()))  # before loading: a job that finds no socket waits for us
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
        # Remove our socket and pid file, never a successor's (the files are looked up by name).
        with contextlib.suppress(OSError):
            if os.stat(address).st_ino == socket_inode:
                os.unlink(address)
        with contextlib.suppress(Exception):
            engine.close()
        with contextlib.suppress(OSError, ValueError):
            if int(pid_file.read_text()) == os.getpid():
                pid_file.unlink()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)  # vLLM's exit-time finalizers were seen to abort (randopt/cli.py)

    def idle_watch() -> None:
        while True:
            time.sleep(1.0)
            with busy:
                if time.monotonic() - last[0] > keep_loaded_s:
                    finish(f"idle for {keep_loaded_s:g} s")

    signal.signal(signal.SIGTERM, lambda *_: finish("SIGTERM"))
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
            elif message[0] == "shutdown":
                conn.send(("ok", None))
                return "asked to stop"
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
    p = argparse.ArgumentParser(prog="python -m randopt.resident", description=__doc__.split("\n\n")[0])
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
