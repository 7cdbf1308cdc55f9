"""Work over one scorer, or over several engines side by side inside one job (randopt/runtime/job_engines.py).

Each scorer drives its own engine; with several, one worker thread a scorer takes the next item as it is
free. Each engine call is a round trip to the engine's own process, so the threads wait on sockets, not on
the GIL, and every answer is the one a lone engine gives (a member's weights depend on its seed alone)."""
from __future__ import annotations

import collections
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from randopt.scoring.scorer import Scorer

Item = TypeVar("Item")
Result = TypeVar("Result")


def over_scorers(scorers: list[Scorer], items: list[Item],
                 answer: Callable[[Scorer, Item], Iterable[Result]]) -> Iterator[Result]:
    """The results of answer(scorer, item) for every item: in order with one scorer, as they are done with
    several. An error in one worker stops the others taking work and is raised here."""
    if len(scorers) == 1:
        for item in items:
            yield from answer(scorers[0], item)
        return
    todo, lock, done = collections.deque(items), threading.Lock(), queue.Queue()   # done: (result, None) or (None, end)

    def work(scorer: Scorer) -> None:
        end = None
        try:
            while True:
                with lock:
                    if not todo:
                        return
                    item = todo.popleft()
                for result in answer(scorer, item):
                    done.put((result, None))
        except BaseException as err:   # to the job's thread
            with lock:
                todo.clear()
            end = err
        finally:
            done.put((None, end or StopIteration()))

    workers = [threading.Thread(target=work, args=(scorer,), daemon=True) for scorer in scorers]
    for worker in workers:
        worker.start()
    running = len(workers)
    while running:
        result, end = done.get()
        if end is None:
            yield result
        elif isinstance(end, StopIteration):
            running -= 1
        else:
            raise end
    for worker in workers:
        worker.join()
