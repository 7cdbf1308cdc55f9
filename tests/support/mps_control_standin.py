"""A stand-in for NVIDIA's nvidia-cuda-mps-control, for the CPU tests of randopt/runtime/mps_daemon.py
(no GPU and no NVIDIA driver here; the real daemon is exercised on the H200: bench/peers/README.md).

It keeps the real program's interface as far as randopt uses it: `-f` runs the control daemon in the
foreground, listening in $CUDA_MPS_PIPE_DIRECTORY and logging to $CUDA_MPS_LOG_DIRECTORY/control.log;
without arguments it is the control client, sending each line of stdin to the daemon and printing the
reply, and failing (exit 1) when no daemon listens or the daemon closes the connection unanswered.
Commands: get_server_list (no servers: there is no CUDA client here) and quit. It writes every command it
gets into control.log, so a test can read what the watcher asked. `install(bin_dir)` puts it on a PATH as
nvidia-cuda-mps-control.

Like the real daemon, it serves one control connection at a time and closes, unanswered, one that comes
while it serves another (the H100's control.log, 2026-12-07: two connections accepted in one millisecond,
one "NEW UI", one reply; the engine job that asked second failed). MPS_STANDIN_SERVE_SECONDS (default 0)
stretches each service, so that a test can make two callers meet.
"""
from __future__ import annotations

import contextlib
import os
import select
import socket
import sys
import time
from pathlib import Path

NAME = "nvidia-cuda-mps-control"


def install(bin_dir: Path) -> Path:
    """An executable named like the real program in bin_dir, running this file with this Python."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    exe = bin_dir / NAME
    exe.write_text(f"#!/bin/sh\nexec {sys.executable} {Path(__file__).resolve()} \"$@\"\n")
    exe.chmod(0o755)
    return exe


def _dirs() -> tuple[Path, Path]:
    return (Path(os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps")),
            Path(os.environ.get("CUDA_MPS_LOG_DIRECTORY", "/var/log/nvidia-mps")))


def _log(log_dir: Path, line: str) -> None:
    with open(log_dir / "control.log", "a") as fh:
        fh.write(line + "\n")


def daemon() -> int:
    pipe, log_dir = _dirs()
    address = pipe / "control"
    address.unlink(missing_ok=True)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(address))
    server.listen()
    (pipe / "nvidia-cuda-mps-control.pid").write_text(str(os.getpid()))
    _log(log_dir, f"started pid {os.getpid()}")
    serve_seconds = float(os.environ.get("MPS_STANDIN_SERVE_SECONDS", "0"))
    while True:
        conn, _ = server.accept()
        with conn:
            command = _serve_alone(server, conn, log_dir, serve_seconds)
            _log(log_dir, f"command {command}")
            if command == "quit":
                conn.sendall(b"\n")
                address.unlink(missing_ok=True)
                (pipe / "nvidia-cuda-mps-control.pid").unlink(missing_ok=True)
                _log(log_dir, "quit")
                return 0
            with contextlib.suppress(OSError):   # a client that left unasked
                conn.sendall(b"\n" if command == "get_server_list" else f"unknown command {command}\n".encode())


def _serve_alone(server: socket.socket, conn: socket.socket, log_dir: Path, seconds: float) -> str:
    """conn's command line; every connection that comes until it is read and `seconds` more have passed is
    closed unanswered, as the real daemon closes one that comes while it serves another."""
    data, deadline = b"", None
    while deadline is None or time.monotonic() < deadline:
        ready, _, _ = select.select([server] + ([conn] if deadline is None else []), [], [], 0.01)
        if server in ready:
            other, _ = server.accept()
            other.close()
            _log(log_dir, "dropped a connection that came while another was served")
        if conn in ready:
            chunk = conn.recv(4096)
            data += chunk
            if not chunk or b"\n" in data:
                deadline = time.monotonic() + seconds
    return data.decode().split("\n")[0].strip()


def client() -> int:
    pipe, _ = _dirs()
    for line in sys.stdin.read().splitlines():
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            try:
                conn.connect(str(pipe / "control"))
            except OSError:
                print("Cannot find MPS control daemon process")
                return 1
            try:
                conn.sendall(line.encode() + b"\n")
                reply = conn.makefile().read()
            except OSError:
                reply = ""
            if not reply:   # closed unanswered: the daemon was serving another connection
                return 1
            sys.stdout.write(reply)
    return 0


if __name__ == "__main__":
    args = sys.argv[1:]
    if args == ["-f"]:
        raise SystemExit(daemon())
    if args:
        print(f"{NAME} (stand-in): only -f and the client mode are here, not {args}", file=sys.stderr)
        raise SystemExit(2)
    raise SystemExit(client())
