"""How the terminal writes one line: a job named by its rule and wildcards, and no line past MAX_CHARS."""
from __future__ import annotations

from collections.abc import Mapping

# Snakemake's own output had lines of 12 KB (a config as JSON in a reason or a command); no line here is longer.
MAX_CHARS = 500


def clip(line: str, limit: int = MAX_CHARS) -> str:
    """line, cut to limit characters with a note of how much was cut."""
    if len(line) <= limit:
        return line
    note = f" ... ({len(line) - limit} more characters: the full text is in .snakemake/log/)"
    return line[: max(0, limit - len(note))] + note


def clip_lines(text: str, limit: int = MAX_CHARS) -> list[str]:
    return [clip(line.rstrip(), limit) for line in str(text).splitlines()]


def job_label(rule: str, wildcards: Mapping[str, str] | None) -> str:
    """'evaluate_shard sigma=0.01 seeds 0000-0019': the rule and what tells its jobs apart. Content keys (ekey,
    mkey, ...) are left out: they tell runs apart, not the jobs of one run, and a person cannot read them."""
    wildcards = dict(wildcards or {})
    parts = [rule]
    first, last = wildcards.pop("first", None), wildcards.pop("last", None)
    for name, value in wildcards.items():
        if not name.endswith("key"):
            parts.append(f"{name}={value}")
    if first is not None and last is not None:
        parts.append(f"seeds {first}-{last}")
    return " ".join(parts)


def duration(seconds: float | None) -> str:
    """'45 s', '3 min 20 s', '2 h 05 min'."""
    if seconds is None:
        return "?"
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
