"""The jobs a Snakemake run ran, read back from the 'Job stats' table it prints (benchmarks and tests
count jobs this way: what Snakemake itself says it ran)."""
from __future__ import annotations


def job_counts(output: str) -> dict[str, int]:
    """Rule -> jobs Snakemake ran, from its 'Job stats' table in output (empty when nothing ran); the
    target rule `all` runs nothing and is left out, as is the total."""
    counts: dict[str, int] = {}
    lines = output.splitlines()
    if "Job stats:" not in lines:
        return counts
    for line in lines[lines.index("Job stats:") + 3:]:
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit():
            break
        if parts[0] not in ("total", "all"):
            counts[parts[0]] = int(parts[1])
    return counts
