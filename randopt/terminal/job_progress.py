"""A running job's progress, read from its own log: what the stage itself reports, never a guess from the clock.

Two kinds of lines carry it (written by randopt/runtime/):
- evaluate_shard's `seed-done {...}` line for each finished seed (runtime/seed_progress.py): the seeds done, out of
  the shard's seeds (its wildcards first..last), at a rate taken over the job's time so far;
- any stage's progress bar written into its log (runtime/progress.py, LogLines): `desc: 40% 2/5 [00:01<00:02,
  1.5item/s]`, whose last line gives done, total, the rate and tqdm's own ETA.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from randopt.runtime import seed_progress

BAR = re.compile(r"^(?P<desc>[^\n:]+): +(?P<pct>\d+)% (?P<done>\d+)/(?P<total>\d+) "
                 r"\[(?P<elapsed>[^<\]]*)<(?P<remaining>[^,\]]*), *(?P<rate>[^\]]*)\]\s*$", re.M)
RATE = re.compile(r"^(?P<n>[\d.]+|\?)(?P<unit>[A-Za-z]+)/s$")   # 12.5seed/s, or ?seed/s before the first
PERIOD = re.compile(r"^(?P<n>[\d.]+)s/(?P<unit>[A-Za-z]+)$")     # 7.46s/seed
# A stage's unit as the terminal names it: a seed at its σ is a member of the population.
UNITS = {"seed": "members"}
TAIL_BYTES = 256 * 1024   # the end of a log holds its last progress line; a long log is not read whole each second


@dataclass(frozen=True)
class JobProgress:
    done: int
    total: int
    unit: str                 # members, seeds, items: what the stage counts
    per_s: float | None       # None until something is done
    eta_s: float | None


def clock_seconds(text: str) -> float | None:
    """tqdm's '01:02' or '1:01:02' as seconds ('?' and anything else: None)."""
    try:
        parts = [int(p) for p in text.strip().split(":")]
    except ValueError:
        return None
    seconds = 0
    for part in parts:
        seconds = seconds * 60 + part
    return float(seconds)


def bar_rate(text: str) -> tuple[float | None, str | None]:
    text = text.strip()
    if m := RATE.match(text):
        return (None if m["n"] == "?" else float(m["n"])), m["unit"]
    if (m := PERIOD.match(text)) and float(m["n"]) > 0:
        return 1 / float(m["n"]), m["unit"]
    return None, None


def from_seed_lines(text: str, first: int, last: int, elapsed_s: float) -> JobProgress:
    done = len(seed_progress.finished(text))
    total = last - first + 1
    per_s = done / elapsed_s if done and elapsed_s > 0 else None
    eta = (total - done) / per_s if per_s else None
    return JobProgress(done, total, "members", per_s, eta)


def from_bar(text: str) -> JobProgress | None:
    bars = list(BAR.finditer(text))
    if not bars:
        return None
    last = bars[-1]
    per_s, unit = bar_rate(last["rate"])
    done, total = int(last["done"]), int(last["total"])
    return JobProgress(done, total, UNITS.get(unit, f"{unit}s") if unit else "items", per_s if done else None,
                       clock_seconds(last["remaining"]) if done < total else 0.0)


def read_tail(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - TAIL_BYTES))
            return f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def job_progress(log: Path, wildcards: dict, elapsed_s: float) -> JobProgress | None:
    """The job's progress from its log so far; None when the log says nothing countable yet."""
    text = read_tail(log)
    if not text:
        return None
    if seed_progress.MARKER in text and "first" in wildcards and "last" in wildcards:
        # the whole log: the seed lines are few (one a seed) and each counts
        try:
            full = log.read_text(errors="replace")
        except OSError:
            full = text
        return from_seed_lines(full, int(wildcards["first"]), int(wildcards["last"]), elapsed_s)
    return from_bar(text)


def progress_text(progress: JobProgress) -> str:
    """'12/20 members, 0.80 members/s, ETA 10 s'."""
    from randopt.terminal.lines import duration
    rate = f", {progress.per_s:.2f} {progress.unit}/s" if progress.per_s else ""
    eta = f", ETA {duration(progress.eta_s)}" if progress.eta_s is not None and progress.done < progress.total else ""
    return f"{progress.done}/{progress.total} {progress.unit}{rate}{eta}"
