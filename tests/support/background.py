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


class Queued(Generic[T]):
    """A job of a BackgroundQueue. result(): its value (or what it raised), waiting while the queue runs it;
    a job the queue has not started yet is taken out of the queue and run by the caller, which would
    otherwise wait for the jobs queued before it. So a job queued late, to fill the queue's idle end, never
    costs the test that reads it more than running it itself."""

    def __init__(self, future: Future, fn: Callable[..., T], args: tuple):
        self._future, self._fn, self._args = future, fn, args
        self._lock = threading.Lock()
        self._taken: Future | None = None

    def result(self) -> T:
        with self._lock:
            if self._taken is None and self._future.cancel():
                self._taken = Future()
                try:
                    self._taken.set_result(self._fn(*self._args))
                except BaseException as err:   # raised again below, and to every later caller
                    self._taken.set_exception(err)
        return (self._taken or self._future).result()


class BackgroundQueue:
    """Setup jobs run one after another in one background thread, in the order they are submitted (the
    order the tests will need them), so that the background keeps about one core busy, not more.
    submit() gives a Queued job: its result() waits for the job, or runs it where the queue has not
    started it, and returns its value or raises."""

    def __init__(self):
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="background")

    def submit(self, fn: Callable[..., T], *args) -> Queued[T]:
        return Queued(self._pool.submit(fn, *args), fn, args)

    def close(self) -> None:
        """At the session's end: drop the jobs not started (their tests did not run, e.g. after -x) and
        wait for the one running, so that nothing is left running."""
        self._pool.shutdown(wait=True, cancel_futures=True)
