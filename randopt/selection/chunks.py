"""Which members each racing job takes: a round's racing members (the previous round's survivors, or
the whole population in round 0) split evenly over the round's race_slice jobs."""
from __future__ import annotations

import math

import numpy as np

from randopt.io import InputError
from randopt.population import Member, Population


def chunk_members(racing: list[Member], chunk: int, chunk_size: int, parallel: int = 1) -> list[Member]:
    """The members race_slice job `chunk` of a round evaluates.

    A round has a fixed number of chunk jobs (known at DAG build: the population over chunk_size, and
    at least `parallel`, the jobs that can run side by side, e.g. one per GPU). The racing members are
    split evenly over ceil(racing / chunk_size) of them, but over no fewer than `parallel` (while there
    are members to split): a round then keeps every GPU busy, and as the field thins, fewer jobs start
    an engine (the others write an empty table)."""
    if chunk < 0:
        raise InputError(f"chunk {chunk}: chunks count from 0")
    active = active_chunks(len(racing), chunk_size, parallel)
    if chunk >= active:
        return []
    return [tuple(m) for m in np.array_split(np.array(racing, dtype=object), active)[chunk].tolist()]


def active_chunks(n_racing: int, chunk_size: int, parallel: int = 1) -> int:
    """The race_slice jobs of a round that get members: ceil(n_racing / chunk_size), at least `parallel`,
    at most one a member."""
    if chunk_size < 1 or parallel < 1:
        raise InputError(f"chunks of size {chunk_size}, {parallel} side by side: sizes must be positive")
    return min(n_racing, max(math.ceil(n_racing / chunk_size), parallel))


def chunk_sizes(n_racing: int, chunk_size: int, parallel: int = 1) -> list[int]:
    """How many members each of a round's active race_slice jobs takes (chunk_members' split)."""
    active = active_chunks(n_racing, chunk_size, parallel)
    return [len(part) for part in np.array_split(np.arange(n_racing), active)] if active else []


def read_racing(survivors_json: dict | None, population: Population) -> list[Member]:
    """The members racing in a round: the previous round's survivors, or the population in round 0."""
    if survivors_json is None:
        return population.members()
    return [(int(s), float(g)) for s, g in survivors_json["keep"]]


