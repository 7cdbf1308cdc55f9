"""The resident server: loads one engine, then answers jobs one at a time until asked to stop or idle
for keep_loaded_s. Started by client.py as `python -m randopt.runtime.resident.server serve ...`;
`... server stop [DIR]` stops a run folder's servers by hand."""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import sys
import threading
import time
import traceback
from multiprocessing.connection import Listener
from pathlib import Path

from randopt.runtime.resident.client import stop_all
from randopt.runtime.resident.protocol import DEFAULT_DIR, INPUT_ERRORS, METHODS
from randopt.runtime.resident.start_lock import clear_phase, start_lock

log = logging.getLogger("randopt")


def serve(*, address: str, kind: str, model_dir: str, options: dict, key: str, keep_loaded_s: float) -> None:
    """Load the engine, then answer jobs one at a time until asked to stop or idle for keep_loaded_s."""
    from randopt.engines.factory import engine_class, track
    from randopt.model.served import served_sha256
    from randopt.runtime.resident.identity import device_name

    logging.basicConfig(level=logging.INFO, format="%(asctime)s resident %(levelname)s %(message)s",
                        stream=sys.stderr)
    directory, device = Path(address).parent, device_name()
    start = time.perf_counter()
    served = _check_key(kind, model_dir, options, key)  # first: loading an engine may set the key's variables
    # The libraries first, outside the start lock: they touch no device memory, so this engine imports
    # them while another one on the same GPU builds (start_lock.py).
    cls = engine_class(kind)
    if preload := getattr(cls, "preload", None):
        preload(**options)
    import_s = time.perf_counter() - start
    log.info("imported the %s engine's libraries in %.1f s", kind, import_s)
    alongside = getattr(cls, "start_alongside", None)
    options, why = alongside(model_dir, options) if alongside else (options, None)
    if why:
        log.info("no start lock: %s", why)
    with start_lock(directory, device, take=why is None):
        locked = time.perf_counter()
        if why is None:
            log.info("start lock taken after %.1f s of waiting", locked - start - import_s)
        engine = track(cls(model_dir, **options))
        build_s = time.perf_counter() - locked
        # said before the lock is let go, so that no other engine's "taken" can come first in the logs
        log.info("built in %.1f s%s", build_s, "; start lock let go" if why is None else "")
    if served_sha256(model_dir) != served:  # the bytes again, not the whole key (see above)
        raise SystemExit(f"{model_dir}: the model's files changed while the engine loaded them; not serving them")
    dtype = getattr(engine, "compute_dtype", None)
    info = {"pid": os.getpid(), "key": key, "load_s": import_s + build_s, "import_s": import_s, "build_s": build_s,
            "start_wait_s": locked - start - import_s,
            "compute_dtype": str(dtype) if dtype is not None else None,
            "compute_dtype_reason": getattr(engine, "compute_dtype_reason", None)}
    authkey = Path(address).with_name("authkey").read_bytes()
    listener = Listener(address, family="AF_UNIX", authkey=authkey)  # bound only now: ready = connectable
    socket_inode = os.stat(address).st_ino
    clear_phase(directory, device)
    log.info("pid %d serving a %s engine at %s (loaded in %.1f s: imports %.1f s, build %.1f s)", os.getpid(), kind,
             address, info["load_s"], import_s, build_s)
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


def _check_key(kind: str, model_dir: str, options: dict, key: str) -> str:
    """The job keyed this server by the model's bytes (identity.py): files that changed since end it
    (exit 1, its log says why) rather than serve other bytes under that key. Returns their sha256."""
    from randopt.model.served import served_sha256
    from randopt.runtime.resident.identity import engine_key

    if engine_key(kind, model_dir, options) != key:
        raise SystemExit(f"{model_dir}: the model's files changed before the engine loaded them (their bytes are not "
                         f"the ones the job keyed this engine by); not serving them")
    return served_sha256(model_dir)


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
    p = argparse.ArgumentParser(prog="python -m randopt.runtime.resident.server", description=__doc__.split("\n\n")[0])
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
