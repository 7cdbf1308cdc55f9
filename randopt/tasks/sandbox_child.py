"""The candidate: the untrusted side of the code task's judge, run by randopt/tasks/code_judge.py in the
OS sandbox (randopt/tasks/sandbox.py) as

    python -I -S sandbox_child.py PROGRAM ENTRY_POINT MEMORY_MB CPU_S IN_FD OUT_FD

It sets its rlimits, runs PROGRAM (the problem's prompt and the model's completion, never the tests),
then answers requests: each line read from IN_FD is a list of calls (each a tuple of arguments, plain
data); it calls ENTRY_POINT on each in turn and writes one line to OUT_FD,

    {"values": [<value>, ...], "stop": null | "<why the calls stopped>"}

with each value encoded by plain_data (so only plain data crosses: an object of the program's own
stops the calls). It stops at the first call that raises or returns something not plain.

Nothing here is trusted: the program can rebind or rewrite any of it. It decides only what the
candidate answers, which is the program's to decide anyway; it holds no expected value, no test and
nothing that forges a verdict (the judge compares, in another process).
"""
import builtins
import json
import os
import resource
import sys

plain_data = None  # the module beside this file, imported by main() (importing this module does nothing)


def limit(memory_mb: int, cpu_s: int) -> None:
    memory = memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))


def describe(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}"[:300]


def answer(function, calls) -> str:
    values, stop = [], None
    for args in calls:
        try:
            value = function(*args)
        except BaseException as err:  # SystemExit and KeyboardInterrupt too: the call did not return
            stop = f"raised {describe(err)}"
            break
        try:
            values.append(plain_data.encode(value))
        except plain_data.NotPlain as err:
            stop = f"returned what is not plain data ({err})"
            break
    return '{"values":[' + ",".join(values) + '],"stop":' + json.dumps(stop) + "}\n"


def write_line(fd: int, line: str) -> None:
    data = line.encode()
    while data:
        data = data[os.write(fd, data):]


def main() -> None:
    global plain_data
    sys.path.append(os.path.dirname(os.path.abspath(__file__)))  # last: randopt/tasks holds a math.py
    import plain_data  # beside this file, in the sandbox's read-only /judge
    program, entry_point, memory_mb, cpu_s, in_fd, out_fd = sys.argv[1:7]
    in_fd, out_fd = int(in_fd), int(out_fd)
    limit(int(memory_mb), int(cpu_s))
    module = type(sys)("__main__")
    module.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = module
    sys.argv = [program]
    requests = os.fdopen(in_fd, "rb")
    try:
        with open(program, encoding="utf-8") as fh:
            code = compile(fh.read(), "completion.py", "exec")
        exec(code, module.__dict__)
        function = module.__dict__[entry_point]
    except BaseException as err:
        write_line(out_fd, json.dumps({"values": [], "stop": f"the program failed: {describe(err)}"}) + "\n")
        return
    for line in requests:
        try:
            calls = plain_data.decode(line)
        except plain_data.NotPlain as err:
            write_line(out_fd, json.dumps({"values": [], "stop": f"a bad request ({err})"}) + "\n")
            return
        write_line(out_fd, answer(function, calls))


if __name__ == "__main__":
    main()
