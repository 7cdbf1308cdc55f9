"""Where untrusted programs run: a process the kernel bounds, started through bubblewrap (bwrap).

The boundary (docs/tasks.md states it for users):
- namespaces of its own: user (uid/gid 65534 inside, no capabilities on the host; no further user
  namespace), mount, PID, network (a down loopback only), IPC, UTS and cgroup; a new session (no
  terminal to push input into); killed when its parent dies;
- a file system of read-only bind mounts: the Python installation that runs it (its site-packages
  hidden under an empty read-only tmpfs), the system's library directories, the sandbox's own
  scripts (randopt/tasks/sandbox_child.py, judge_child.py, plain_data.py) at /judge, and the program
  at /scratch/program.py; the only writable places are /scratch and /tmp, tmpfs of TMPFS_BYTES each,
  in memory and gone with the sandbox, so nothing it writes reaches the host's disks; /dev (null,
  zero, random, ...) and a /proc of its own PID namespace. Nothing else of the host exists there: not
  /etc, /home, /root or the data the judge holds;
- a seccomp filter (randopt/tasks/seccomp_filter.py) refusing new processes and threads, namespace and
  mount changes, tracing, pidfds and the kernel's riskiest interfaces;
- rlimits set by the child itself before any untrusted code runs: address space, CPU seconds, file
  size, no core file, no new process;
- a wall-clock timeout, after which its process group is killed; its PID namespace dies with it.

Where bwrap is missing or the host forbids the namespaces (no unprivileged user namespaces, a
container without the rights), untrusted code is refused unless the config opts in
(task.code.unsandboxed: true), which runs it as a plain process with the rlimits only.
"""
from __future__ import annotations

import functools
import os
import shutil
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

from randopt.io import InputError
from randopt.tasks import judge_child, sandbox_child, seccomp_filter  # noqa: F401  the scripts it runs:
# imported (which does nothing) so that the code key of the scorer holds them

HERE = Path(__file__).resolve().parent
SCRIPTS = ("sandbox_child.py", "judge_child.py", "plain_data.py")  # bound at /judge, read-only
INSIDE_SCRIPTS, INSIDE_SCRATCH = "/judge", "/scratch"
LIBRARY_DIRS = ("/lib", "/lib64", "/lib32", "/libx32", "/usr/lib", "/usr/lib64", "/usr/lib32")
SANDBOX_UID = 65534
TMPFS_BYTES = 32 << 20  # each of /scratch and /tmp: a program that fills them gets ENOSPC, not the host's memory
OPT_IN = "task.code.unsandboxed: true"


class SandboxUnavailable(InputError):
    """The OS sandbox cannot start here, and running untrusted code without it was not asked for (an
    InputError, so a stage says it in one line: randopt/runtime/cli.py)."""


def python() -> str:
    """The interpreter the sandbox runs: the real file behind this one (a venv's python is a link),
    run with -I -S, so no site-packages and no environment reach it."""
    return os.path.realpath(sys.executable)


def _python_binds() -> list[str]:
    args, roots = [], []
    for root in sorted({os.path.realpath(p) for p in (sys.base_prefix, sys.base_exec_prefix)}):
        if not any(root.startswith(r + "/") or root == r for r in roots):
            roots.append(root)
            args += ["--ro-bind", root, root]
    exe = python()
    if not any(exe.startswith(r + "/") for r in roots):
        args += ["--ro-bind", exe, exe]
    return args


def _hidden_packages(bound: list[str]) -> list[str]:
    """Every site-packages of this Python inside what is bound, each hidden by an empty tmpfs (the
    judge's data ships in a package; nothing there is for the program)."""
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    dirs = {os.path.realpath(p) for p in [*site.getsitepackages(), sysconfig.get_path("purelib"),
                                         sysconfig.get_path("platlib")]}
    for prefix in {sys.base_prefix, sys.base_exec_prefix, "/usr", "/usr/local"}:
        dirs |= {os.path.realpath(os.path.join(prefix, "lib", v, d)) for v in (version, "python3")
                 for d in ("site-packages", "dist-packages")}
    inside = [d for d in sorted(dirs) if os.path.isdir(d) and any(d.startswith(b + "/") for b in bound)]
    return [a for d in inside for a in ("--size", "4096", "--tmpfs", d, "--remount-ro", d)]


def _library_binds() -> list[str]:
    args = []
    for path in LIBRARY_DIRS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    return args


@functools.cache
def _static_args() -> tuple[str, ...]:
    args = ["--unshare-all", "--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID),
            "--disable-userns", "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--clearenv",
            "--hostname", "sandbox", *_library_binds(), *_python_binds()]
    bound = [os.path.realpath(args[i + 1]) for i, a in enumerate(args) if a == "--ro-bind"]
    args += _hidden_packages(bound)
    for name in SCRIPTS:
        args += ["--ro-bind", str(HERE / name), f"{INSIDE_SCRIPTS}/{name}"]
    args += ["--proc", "/proc", "--dev", "/dev", "--size", str(TMPFS_BYTES), "--tmpfs", "/tmp",
             "--size", str(TMPFS_BYTES), "--tmpfs", INSIDE_SCRATCH]
    return tuple(args)


def bwrap() -> str | None:
    return shutil.which("bwrap")


ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}


def sandboxed_command(scratch: Path, script: str, args: list[str], seccomp_fd: int) -> list[str]:
    """bwrap's command line running `python -I -S /judge/<script> args`, the files of the host's scratch
    directory bound read-only into its /scratch."""
    env = [a for k, v in {**ENV, "HOME": INSIDE_SCRATCH, "TMPDIR": "/tmp"}.items() for a in ("--setenv", k, v)]
    files = [a for f in sorted(scratch.iterdir()) for a in ("--ro-bind", str(f), f"{INSIDE_SCRATCH}/{f.name}")]
    return [bwrap(), *_static_args(), *env, *files, "--chdir", INSIDE_SCRATCH,
            "--remount-ro", "/", "--seccomp", str(seccomp_fd), "--",
            python(), "-I", "-S", f"{INSIDE_SCRIPTS}/{script}", *args]


def plain_command(script: str, args: list[str]) -> list[str]:
    """The same script as a plain process (the opt-in without the OS sandbox)."""
    return [python(), "-I", "-S", str(HERE / script), *args]


def seccomp_pipe() -> int:
    """A pipe's read end holding the compiled filter, for bwrap's --seccomp (it reads it to the end)."""
    read, write = os.pipe()
    try:
        os.write(write, seccomp_filter.program())
    finally:
        os.close(write)
    return read


def start(script: str, args: list[str], scratch: Path, *, sandboxed: bool, pass_fds=(), stderr=None) -> subprocess.Popen:
    """Start a script of this package in the sandbox (or, opted in, as a plain process in scratch), in a
    session of its own, stdin and stdout closed; `args` name paths as the process sees them."""
    if not sandboxed:
        return subprocess.Popen(plain_command(script, args), cwd=scratch, env={**ENV, "HOME": str(scratch),
                                "TMPDIR": str(scratch)}, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=stderr, pass_fds=pass_fds, start_new_session=True)
    filter_fd = seccomp_pipe()
    try:
        return subprocess.Popen(sandboxed_command(scratch, script, args, filter_fd), env=ENV,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr,
                                pass_fds=(*pass_fds, filter_fd), start_new_session=True)
    finally:
        os.close(filter_fd)


def scratch_path(scratch: Path, name: str, sandboxed: bool) -> str:
    """A file of the scratch directory as the process names it."""
    return f"{INSIDE_SCRATCH}/{name}" if sandboxed else str(scratch / name)


@functools.cache
def unavailable_reason() -> str | None:
    """Why the OS sandbox cannot run here (None when it can): tried once per process, by running
    `python -c pass` in it."""
    if bwrap() is None:
        return "bubblewrap (bwrap) is not installed"
    try:
        seccomp_filter.program()
    except ValueError as err:
        return str(err)
    import tempfile
    with tempfile.TemporaryDirectory(prefix="randopt-probe-") as scratch:
        filter_fd = seccomp_pipe()
        try:
            command = sandboxed_command(Path(scratch), "plain_data.py", [], filter_fd)
            probe = subprocess.run(command, env=ENV, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                   pass_fds=(filter_fd,), timeout=30)
        except (OSError, subprocess.TimeoutExpired) as err:
            return f"bwrap could not start ({err})"
        finally:
            os.close(filter_fd)
    if probe.returncode != 0:
        lines = probe.stderr.strip().splitlines()
        return f"bwrap failed here ({lines[-1] if lines else f'exit status {probe.returncode}'})"
    return None


def require(unsandboxed_ok: bool) -> bool:
    """Whether to run in the OS sandbox: True where it works; False where it does not and the config
    opted in; else SandboxUnavailable, saying why and what to do."""
    reason = unavailable_reason()
    if reason is None:
        return True
    if unsandboxed_ok:
        return False
    raise SandboxUnavailable(
        f"the code task runs model-written programs only inside an OS sandbox, and here {reason}: install "
        f"bubblewrap (Debian/Ubuntu: apt-get install bubblewrap) on a host that allows user namespaces, or set "
        f"{OPT_IN} to run them as plain processes with rlimits only (no file, process or network boundary)")
