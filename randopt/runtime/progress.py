"""Progress of the long stages for people: a tqdm bar on a terminal, a line every few percent in a log.

tqdm redraws its bar with carriage returns, which in a log file (a stage's stderr under Snakemake)
piles every update onto one endless line. When the stream is not a terminal, the bar is written
through LogLines instead: one plain line per update, and updates only every ~5 % of the total (the
closing line may repeat the last one with its final rate).
"""
from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Iterator
from typing import TextIO, TypeVar

from tqdm import tqdm

T = TypeVar("T")

LOG_UPDATES = 20  # lines per bar in a log: one per 5 %
# In a log the bar's drawing is noise; the numbers stay: percent, done/total, elapsed<ETA, rate.
LOG_FORMAT = "{desc}: {percentage:3.0f}% {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}]"


class LogLines:
    """A file-like wrapper that turns tqdm's carriage-return redraws into one line each."""

    def __init__(self, stream: TextIO):
        self.stream = stream

    def write(self, text: str) -> int:
        line = text.replace("\r", "").rstrip()
        if line:
            self.stream.write(line + "\n")
        return len(text)

    def flush(self) -> None:
        self.stream.flush()


def progress(items: Iterable[T], *, total: int, desc: str, unit: str, stream: TextIO | None = None) -> Iterator[T]:
    """items, with a progress bar of `total` `unit`s (done, total, rate, ETA) on stream (stderr)."""
    stream = stream or sys.stderr
    if stream.isatty():
        return iter(tqdm(items, total=total, desc=desc, unit=unit, file=stream, dynamic_ncols=True))
    return iter(tqdm(items, total=total, desc=desc, unit=unit, file=LogLines(stream), bar_format=LOG_FORMAT,
                     mininterval=0, maxinterval=float("inf"), miniters=max(1, math.ceil(total / LOG_UPDATES)),
                     smoothing=0))  # the rate and ETA of a log line: the mean since the start, not a recent burst
