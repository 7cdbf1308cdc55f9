"""Replicates of one protocol (the same model, task, population, top-k fractions, decoding and noise; other
train splits or other seed ranges) pooled into one estimate of each paired gain, with its interval.

The test problem is the unit. For each distinct problem id, the per-problem difference (first side right
minus second side right: 1, 0 or -1) is averaged over the replicates that answered it; the pooled gain is the
mean of those averages over the distinct problems, and its standard error their sample sd over the square
root of their number. Replicates on the same test problems thus count each problem once (their gains are
correlated through the problems, and averaging per problem keeps that correlation out of the error), and
replicates on disjoint problems count every problem. The interval is the normal one, gain +- z(0.975) * se.
What it leaves out: a spread of the gain between replicates beyond the problems' own noise (with two or
three replicates it cannot be estimated); read the replicates' own gains beside the pooled one.
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np

from randopt.io import InputError


def protocol(record: dict) -> dict:
    """What must be the same for two records to be replicates of one protocol."""
    return {"model": record["model"]["id"], "task": record["task"]["kind"], "noise": record["noise"]["kind"],
            "sigmas": record["population"]["sigmas"], "n_seeds": record["population"]["n_seeds"],
            "fractions": [t["fraction"] for t in record["topk"]], "decode": record["decode"]}


def same_protocol(records: dict[str, dict]) -> dict:
    """The records' common protocol; an InputError naming what differs, or a record without per-problem vectors."""
    if len(records) < 2:
        raise InputError("pooling needs at least two records")
    bare = [name for name, record in records.items() if "per_problem" not in record]
    if bare:
        raise InputError(f"{bare}: no per-problem vectors (written before records carried them); rerun the record")
    (first, reference), *rest = ((name, protocol(r)) for name, r in records.items())
    for name, other in rest:
        differ = sorted(key for key in reference if reference[key] != other[key])
        if differ:
            raise InputError(f"{name} is not a replicate of {first}: its {', '.join(differ)} differ")
    return reference


def differences(record: dict, comparison: str, fraction: str) -> dict[str, int] | None:
    """{problem id: first side right - second side right} of one comparison of one record's vectors; None where
    the record has no such vectors (a control it did not run). comparison: topk_vs_base, random_vs_base,
    topk_vs_random, sc_vs_base or topk_vs_sc."""
    block = record["per_problem"]
    sides = {"topk": block["ensemble_correct"], "random": block.get("control_correct") or {},
             "sc": block.get("sc_correct") or {}, "base": {fraction: block["base_correct"]}}
    first, second = (sides[side].get(fraction) for side in comparison.split("_vs_"))
    if first is None or second is None:
        return None
    return {pid: int(a) - int(b) for pid, a, b in zip(block["problem_ids"], first, second)}


def pooled_gain(per_replicate: list[dict[str, int]]) -> dict:
    """{"gain", "ci95", "se", "n_problems", "n_replicates"} from each replicate's per-problem differences (the
    module's docstring says how)."""
    from scipy import stats   # imported where used (~0.9 s)
    by_problem = defaultdict(list)
    for replicate in per_replicate:
        for pid, diff in replicate.items():
            by_problem[pid].append(diff)
    means = np.array([np.mean(diffs) for diffs in by_problem.values()], dtype=np.float64)
    gain = float(means.mean())
    se = float(means.std(ddof=1) / np.sqrt(means.size)) if means.size > 1 else 0.0
    z = float(stats.norm.ppf(0.975))
    return {"gain": gain, "ci95": [gain - z * se, gain + z * se], "se": se,
            "n_problems": int(means.size), "n_replicates": len(per_replicate)}


def pool(records: dict[str, dict]) -> dict:
    """{"protocol", "replicates": {name: {comparison: {fraction: gain}}}, "pooled": {comparison: {fraction:
    pooled_gain}}} of records named by their paths. A comparison is pooled where every record has it."""
    common = same_protocol(records)
    fractions = [repr(float(f)) for f in common["fractions"]]
    replicates, pooled = {name: {} for name in records}, {}
    for comparison in ("topk_vs_base", "random_vs_base", "topk_vs_random", "sc_vs_base", "topk_vs_sc"):
        for fraction in fractions:
            found = {name: differences(record, comparison, fraction) for name, record in records.items()}
            if any(diffs is None for diffs in found.values()):
                continue
            for name, diffs in found.items():
                replicates[name].setdefault(comparison, {})[fraction] = float(np.mean(list(diffs.values())))
            pooled.setdefault(comparison, {})[fraction] = pooled_gain(list(found.values()))
    return {"protocol": common, "replicates": replicates, "pooled": pooled}
