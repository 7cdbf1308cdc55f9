"""The sandboxed process of the code task, run as a script by randopt/tasks/sandbox.py (the tests import it
to check its parts; importing it does nothing):

    python -I -S randopt/tasks/sandbox_child.py PROGRAM MEMORY_MB CPU_S REPORT_FD    (the pass token on stdin)

It runs PROGRAM (prompt + completion + tests + check(...)) and reports a pass by writing the token to
REPORT_FD once the program has returned normally. Nothing else is a pass: not an exit status of 0.

The program runs in this process, so it can call any function, rebind any module attribute (os.path,
this module's globals, builtins), write to any open fd, end the process at any point (sys.exit,
os._exit, atexit) and read every frame below its own (f_back needs no audited call: a signal
handler's frame is enough). Where each part lives follows from that:
- the token is only in the arguments of C callables (functools.partial) that a C loop (a deque over
  a map) calls in a thread of their own: exec(program), then write(REPORT_FD, token), then _exit(0).
  No Python frame sits below the program in that thread, the main thread's frames hold only the wait,
  and gc's object walks, the one way left to those objects, are refused. An exception or an exit in
  the program ends the loop before the write;
- the audit hook's state is its closure: immutable constants and C functions bound before the program
  runs. It reads no module global and calls nothing the program can rebind: paths are resolved with
  the readlink it holds, not with os.path (which is the program's to rebind);
- the program runs in a module of its own (sys.modules["__main__"] is swapped for it);
- what Python cannot hold, the kernel does. As root the process becomes uid/gid 65534 keeping one
  capability, reading (the Python it runs may sit where that uid cannot look), so RLIMIT_NPROC 0 stops
  every new process or thread, whatever call makes it (an unaudited _posixsubprocess.fork_exec
  included), files outside the scratch directory cannot be written where that uid may not, and others'
  processes cannot be signalled. The host's root ignores RLIMIT_NPROC, hence the drop; where the drop
  is refused (a user namespace that maps no 65534) the process is not the host's root and RLIMIT_NPROC
  binds as it is; a line on stderr says so (NOTE). Also: address space MEMORY_MB, CPU seconds CPU_S,
  1 MB per file written, no core file, and as root a network namespace of its own.

What this is not: a boundary against a program that corrupts CPython's memory or calls native code the
hook does not see (docs/tasks.md says what is known); such a program acts with the rights above.
"""
import builtins
import os
import resource
import sys
import _thread
import time
from _collections import deque  # the C types themselves: no Python frame runs under the program, and
from _functools import partial  # importing the public modules would cost ~4 ms of a ~30 ms run
from _operator import methodcaller

VIOLATION = "sandbox violation"
NOTE = "randopt sandbox note"
NOBODY = 65534  # the uid and gid a root sandbox runs as
CAP_DAC_READ_SEARCH = 2
PR_SET_KEEPCAPS, PR_SET_NO_NEW_PRIVS = 8, 38
CLONE_NEWNET = 0x40000000
LINUX_CAPABILITY_VERSION_3 = 0x20080522

# Refused outright: processes, signals to others, sockets, ctypes, raising limits, changing directory,
# tracing (a trace function can jump over the tests' asserts), a hook of the program's own, and gc's
# object walks (the one way to the objects that hold the pass token).
BLOCKED = ("os.exec", "os.posix_spawn", "os.fork", "os.forkpty", "os.system", "os.kill", "os.killpg", "subprocess.",
           "pty.", "socket.", "ctypes.", "sqlite3.", "resource.setrlimit", "resource.prlimit", "signal.pthread_kill",
           "os.chroot", "os.chdir", "sys.settrace", "sys.setprofile", "sys.addaudithook", "gc.get_",
           "_thread.start", "winreg.")
# The events on paths (the os module's; shutil, glob, pathlib and tempfile act through them): for each
# path argument, its index and the index of the dir_fd it is relative to (None: the working directory);
# and whether the event changes the file system.
PATH_EVENTS = {
    "os.listdir": (((0, None),), False), "os.scandir": (((0, None),), False),
    "os.listxattr": (((0, None),), False), "os.getxattr": (((0, None),), False),
    "os.remove": (((0, 1),), True), "os.rmdir": (((0, 1),), True), "os.mkdir": (((0, 2),), True),
    "os.rename": (((0, 2), (1, 3)), True), "os.link": (((0, 2), (1, 3)), True),
    "os.symlink": (((0, None), (1, 2)), True),  # the link's text is checked as a path from the working directory
    "os.chmod": (((0, 2),), True), "os.chown": (((0, 3),), True), "os.utime": (((0, 3),), True),
    "os.truncate": (((0, None),), True), "os.setxattr": (((0, None),), True), "os.removexattr": (((0, None),), True),
}
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def make_guard(root: str, readable: tuple):
    """The audit hook for a program whose scratch directory (and working directory) is `root`: it may
    read and write there, read under `readable` (Python's own library, for imports), and nothing else.

    Every name the hook and its helpers use is bound here, as a closure constant, before the program
    runs (tests/test_code_sandbox.py checks that their code loads no global): rebinding os.readlink,
    PermissionError or this module's tables afterwards changes nothing the hook does."""
    readlink, str_, bytes_, int_, type_, len_ = os.readlink, str, bytes, int, type, len
    OSError_, PermissionError_ = OSError, PermissionError
    violation, blocked, path_events, write_flags = VIOLATION, BLOCKED, dict(PATH_EVENTS), WRITE_FLAGS
    inside_root, readable = root.rstrip("/") + "/", tuple(p.rstrip("/") + "/" for p in readable)

    def resolve(path):
        """posixpath.realpath over the readlink bound above, relative paths from root, with a "/" at
        the end (so a prefix test is a test of being inside); None past 40 links."""
        todo = (path if path.startswith("/") else inside_root + path).split("/")
        todo.reverse()
        done, hops = "", 0
        while todo:
            name = todo.pop()
            if name == "" or name == ".":
                continue
            if name == "..":
                done = done[:done.rfind("/")] if done else ""
                continue
            step = done + "/" + name
            try:
                target = readlink(step)
            except OSError_:  # not a link, or not there: the name stands as it is
                done = step
                continue
            hops += 1
            if hops > 40:
                return None
            if target.startswith("/"):
                done = ""
            parts = target.split("/")
            parts.reverse()
            todo.extend(parts)
        return done + "/"

    def fd_path(fd):
        """The file an fd is open on, as the kernel names it; None for a pipe, socket or closed fd."""
        try:
            target = readlink(f"/proc/self/fd/{fd}")
        except OSError_:
            return None
        return target if target.startswith("/") else None

    def where(path, dir_fd=None):
        """The resolved path an argument names (a str, bytes or fd, relative to dir_fd if given); None
        when the hook cannot tell, which is refused."""
        if type_(path) is int_:
            base = fd_path(path)
            return None if base is None else resolve(base)
        if type_(path) is str_:
            text = path
        elif type_(path) is bytes_:
            text = path.decode("utf-8", "surrogateescape")
        else:
            return None
        if type_(dir_fd) is int_ and dir_fd >= 0 and not text.startswith("/"):  # -1 and AT_FDCWD: root
            base = fd_path(dir_fd)
            if base is None:
                return None
            text = base + "/" + text
        return resolve(text)

    def check(path, dir_fd, writing, what):
        place = where(path, dir_fd)
        if place is not None and (place.startswith(inside_root) or (not writing and place.startswith(readable))):
            return
        raise PermissionError_(f"{violation}: {what} {path!r} outside the scratch directory")

    def hook(event, args):
        if event.startswith(blocked):
            raise PermissionError_(f"{violation}: {event}")
        if event == "open":
            path, mode, flags = args
            if path is None or type_(path) is int_:
                return  # an fd already open, through this hook
            writing = ((flags or 0) & write_flags) != 0
            absolute = type_(path) in (str_, bytes_) and path[:1] in ("/", b"/")
            if mode is None and writing and not absolute:
                # os.open: its event leaves out dir_fd, so a relative path is only read (a read relative
                # to an fd the program opened stays where it may read, links in its own files aside)
                raise PermissionError_(f"{violation}: os.open writing the relative path {path!r}; use an absolute one")
            check(path, None, writing, "open")
        elif event == "import":
            # a native module runs code no hook sees: only Python's own may load, none the program wrote
            if len_(args) > 1 and args[1] is not None:
                place = where(args[1])
                if place is None or not place.startswith(readable):
                    raise PermissionError_(f"{violation}: native module {args[1]!r} outside Python's library")
        else:
            spec = path_events.get(event)
            if spec is None:
                return
            paths, writing = spec
            for i, fd_i in paths:
                if len_(args) > i and args[i] is not None:
                    check(args[i], args[fd_i] if fd_i is not None and len_(args) > fd_i else None, writing, event)

    return hook


def python_dirs() -> tuple:
    """Where Python's library lives: what a program may read besides its scratch directory."""
    return tuple({os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)})


def limit(memory_mb: int, cpu_s: int) -> None:
    memory = memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))  # no new process or thread: binds every uid but the host's root


def _libc():
    import ctypes
    return ctypes, ctypes.CDLL(None, use_errno=True)


def cut_network() -> bool:
    """A network namespace of its own (no interfaces but a down loopback); False where it is not allowed."""
    try:
        _, libc = _libc()
        return libc.unshare(CLONE_NEWNET) == 0
    except (OSError, AttributeError):
        return False


def drop_root(scratch: str) -> None:
    """As root: become uid/gid 65534 keeping only CAP_DAC_READ_SEARCH, so RLIMIT_NPROC binds and the
    kernel refuses writes that uid may not make (scratch is handed to it). A refused setresuid leaves
    the process as it is, with a NOTE on stderr; a refused capset after it ends the process (it would
    otherwise hold root's capabilities under another uid)."""
    ctypes, libc = _libc()
    try:
        os.chown(scratch, NOBODY, NOBODY)
        if libc.prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_KEEPCAPS)")
        os.setgroups([])
        os.setresgid(NOBODY, NOBODY, NOBODY)
        os.setresuid(NOBODY, NOBODY, NOBODY)
    except OSError as err:
        print(f"{NOTE}: running as root, not uid {NOBODY} ({err}); processes are bounded only where this "
              f"is not the host's root", file=sys.stderr)
        return
    keep = 1 << CAP_DAC_READ_SEARCH
    header = (ctypes.c_uint32 * 2)(LINUX_CAPABILITY_VERSION_3, 0)
    caps = (ctypes.c_uint32 * 6)(keep, keep, 0, 0, 0, 0)  # effective, permitted, inheritable; two words
    if libc.capset(header, caps) != 0 or libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        print(f"{NOTE}: cannot drop root's capabilities ({os.strerror(ctypes.get_errno())})", file=sys.stderr)
        os._exit(3)


def read_token() -> bytes:
    chunks = []
    while chunk := os.read(0, 256):
        chunks.append(chunk)
    return b"".join(chunks)


def start_program(code, report_fd: int):
    """Start the thread that runs the program and, once it returned, writes the pass token; it waits
    for the returned `go` (called once the limits and the hook are in place). The token is read here,
    so no frame that outlives this call holds it."""
    module = type(sys)("__main__")
    module.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = module
    running, start = _thread.allocate_lock(), _thread.allocate_lock()
    running.acquire()
    start.acquire()
    steps = (running.release, start.acquire, partial(exec, code, module.__dict__),
             partial(os.write, report_fd, read_token()), partial(os._exit, 0))
    _thread.start_new_thread(deque, (map(methodcaller("__call__"), steps), 0))
    running.acquire()  # the thread is counted by _thread._count() from here on

    def go(release=start.release, count=_thread._count, sleep=time.sleep, flush=sys.stderr.flush, exit=os._exit):
        """Let the program run; if its thread ends without the process ending (an exception, sys.exit),
        exit 1 at once (the program's atexit handlers never run)."""
        release()
        try:
            while count():
                sleep(0.005)
            flush()
        finally:
            exit(1)

    return go


def main() -> None:
    program, memory_mb, cpu_s, report_fd = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    with open(program, encoding="utf-8") as fh:
        code = compile(fh.read(), "completion.py", "exec")
    scratch = os.path.dirname(os.path.abspath(program))
    if os.geteuid() == 0:
        cut_network()
        drop_root(scratch)
    sys.argv = [program]
    go = start_program(code, report_fd)
    limit(memory_mb, cpu_s)
    sys.addaudithook(make_guard(scratch, python_dirs()))
    go()


if __name__ == "__main__":
    main()
