"""A slow, self-contained piece of test setup (a workflow run, a kill-and-resume sequence) made in a thread
while other tests run.

A tiny workflow run keeps about one core busy: Snakemake, each job's Python start and the small
stages are single-threaded, only the engine's generation uses both threads. On the 2-core CI machine
the other core idles meanwhile, so a fixture that starts such a run in the background, early, and
hands its result over when a test asks for it, takes that time off the suite without changing what
runs or what is checked. The runs have no wall-clock limits and their kill points wait on facts on
disk (tests/support/workflow.py), so sharing the cores changes how long they take, not what they do.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, TypeVar

T = TypeVar("T")


class Background(Generic[T]):
    """fn(*args) in a daemon thread from now on; result() waits for it and returns what it returned, or
    raises what it raised (each time it is asked)."""

    def __init__(self, fn: Callable[..., T], *args, name: str | None = None):
        self._value: T | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(fn, *args), name=name or fn.__name__, daemon=True)
        self._thread.start()

    def _run(self, fn, *args) -> None:
        try:
            self._value = fn(*args)
        except BaseException as err:  # raised again in the test that asks for the result
            self._error = err

    def result(self) -> T:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value

    def wait(self) -> None:
        """Until it has ended, whatever the outcome (at teardown: nothing left running)."""
        self._thread.join()


class BackgroundQueue:
    """Setup jobs run one after another in one background thread, in the order they are submitted (the
    order the tests will need them), so that the background keeps about one core busy, not more.
    submit() gives a Future: its result() waits for the job and returns its value or raises."""

    def __init__(self):
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="background")

    def submit(self, fn: Callable[..., T], *args) -> Future:
        return self._pool.submit(fn, *args)

    def close(self) -> None:
        """At the session's end: drop the jobs not started (their tests did not run, e.g. after -x) and
        wait for the one running, so that nothing is left running."""
        self._pool.shutdown(wait=True, cancel_futures=True)
