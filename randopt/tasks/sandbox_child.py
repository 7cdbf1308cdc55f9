"""The sandboxed process of the code task (run as a script by randopt/tasks/sandbox.py, never imported
for its effects): set its own limits, cut the network where the kernel lets it, install an audit hook,
then run the program file it is given.

    python -I -S randopt/tasks/sandbox_child.py PROGRAM MEMORY_MB CPU_S

The limits (resource.setrlimit): address space MEMORY_MB, CPU seconds CPU_S, files written 1 MB,
processes (for a non-root user). The audit hook (PEP 578: once added, Python code cannot remove it)
refuses what a completion has no business doing: starting processes (fork, exec, system, spawn,
subprocess), sockets, ctypes, raising its limits, signalling other processes, and opening, listing or
changing files outside its scratch directory (reading Python's own library stays allowed, for imports).
The parent adds a wall-clock timeout and kills the whole process group (randopt/tasks/sandbox.py).
"""
import os
import resource
import sys

VIOLATION = "sandbox violation"
_BLOCKED_PREFIXES = ("os.exec", "os.spawn", "os.posix_spawn", "os.fork", "os.forkpty", "os.system", "os.kill",
                     "os.killpg", "subprocess.", "socket.", "ctypes.", "resource.setrlimit", "resource.prlimit",
                     "signal.pthread_kill", "os.chroot", "os.chdir", "os.setuid", "os.setgid", "pty.", "winreg.",
                     "_posixsubprocess.")
_PATH_EVENTS = ("os.listdir", "os.scandir", "os.remove", "os.rename", "os.rmdir", "os.mkdir", "shutil.rmtree",
                "shutil.copyfile", "shutil.move", "os.chmod", "os.chown", "os.symlink", "os.link", "os.truncate",
                "os.utime", "os.walk", "glob.glob")


_LIST_EVENTS = ("os.listdir", "os.scandir")


def limit(memory_mb: int, cpu_s: int) -> None:
    memory = memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    try:
        resource.setrlimit(resource.RLIMIT_NPROC, (0, 0) if os.getuid() else (1, 1))
    except (ValueError, OSError):
        pass  # a limit under the processes already running is refused on some kernels: the hook still blocks forks


def cut_network() -> bool:
    """A network namespace of its own (no interfaces but a down loopback); False where it is not allowed."""
    try:
        import ctypes
        return ctypes.CDLL(None, use_errno=True).unshare(0x40000000) == 0  # CLONE_NEWNET
    except (OSError, AttributeError):
        return False


def guard(root: str) -> None:
    root = os.path.realpath(root)
    readable = tuple({os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix,
                                                      sys.base_exec_prefix)})
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC

    def inside(path) -> bool:
        real = os.path.realpath(os.fsdecode(path))
        return real == root or real.startswith(root + os.sep)

    def hook(event, args):
        if event.startswith(_BLOCKED_PREFIXES):
            raise PermissionError(f"{VIOLATION}: {event}")
        if event == "open":
            path, mode, flags = args
            if path is None or isinstance(path, int) or inside(path):
                return
            writing = bool(mode and any(c in mode for c in "wax+")) or bool((flags or 0) & write_flags)
            if not writing and os.path.realpath(os.fsdecode(path)).startswith(readable):
                return
            raise PermissionError(f"{VIOLATION}: open {os.fsdecode(path)!r} outside the scratch directory")
        if event in _PATH_EVENTS and args and isinstance(args[0], (str, bytes, os.PathLike)) and not inside(args[0]):
            if event in _LIST_EVENTS and os.path.realpath(os.fsdecode(args[0])).startswith(readable):
                return  # the import system lists Python's library folders
            raise PermissionError(f"{VIOLATION}: {event} {os.fsdecode(args[0])!r} outside the scratch directory")

    sys.addaudithook(hook)


def main() -> None:
    program, memory_mb, cpu_s = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    with open(program, encoding="utf-8") as fh:
        source = fh.read()
    code = compile(source, "completion.py", "exec")
    cut_network()
    limit(memory_mb, cpu_s)
    guard(os.path.dirname(os.path.abspath(program)))
    sys.argv = [program]
    exec(code, {"__name__": "__main__", "__builtins__": __builtins__})


if __name__ == "__main__":
    main()
