"""Every paired comparison a record makes, recomputed from its own per-problem vectors (record["per_problem"]):
each top-k vote against the base, under controls.random_vote the random vote against the base and the top-k
vote against the random vote, and under controls.self_consistency SC@k against the base and the top-k vote
against SC@k. (controls.random_members' comparison is with an expectation, not a 0/1 vector: its own
statistics recompute it from random_expected_correct.) What bench/RESULTS.md lists for each committed record, and how a reader
checks a record's statistics without trusting them."""
from __future__ import annotations

from randopt.records.statistics import ensemble_gain, with_holm

# A record written before the per_problem block (issue 68) carries only its statistics' summaries.
NO_VECTORS = "no per-problem vectors (written before records carried them): its gains and p cannot be recomputed"


def has_vectors(record: dict) -> bool:
    return "per_problem" in record


def comparisons(record: dict) -> dict[str, dict[str, dict]]:
    """{comparison: {fraction: ensemble_gain's result with p_holm (Holm over the fractions)}} from
    record["per_problem"]; comparisons "topk_vs_base", and with a random-vote control "random_vs_base" and
    "topk_vs_random", with self-consistency "sc_vs_base" and "topk_vs_sc". The gain is always the first named
    side's minus the second's."""
    block = record["per_problem"]
    base, topk = block["base_correct"], block["ensemble_correct"]
    out = {"topk_vs_base": with_holm({f: ensemble_gain(base, correct) for f, correct in topk.items()})}
    drawn = block.get("control_correct") or {}
    if drawn:
        out["random_vs_base"] = with_holm({f: ensemble_gain(base, correct) for f, correct in drawn.items()})
        out["topk_vs_random"] = with_holm({f: ensemble_gain(correct, topk[f]) for f, correct in drawn.items()})
    sampled = block.get("sc_correct") or {}
    if sampled:   # controls.self_consistency
        out["sc_vs_base"] = with_holm({f: ensemble_gain(base, correct) for f, correct in sampled.items()})
        out["topk_vs_sc"] = with_holm({f: ensemble_gain(correct, topk[f]) for f, correct in sampled.items()})
    return out


def cell(gain: dict) -> str:
    """'+3/−1, +0.040 [+0.000, +0.080]*, p 0.62, Holm 1, detects ≥ 0.151': discordant counts (first side only
    right / second only right), the gain with its bootstrap interval (* where fewer than 10 problems are
    discordant, so the interval is no test), the exact p, Holm's p and the smallest gain detectable at 80 %."""
    low, high = gain["ci95"]
    flag = "*" if gain["few_discordant"] else ""
    detects = "none detectable" if gain["detectable_gain_80"] is None else f"detects ≥ {gain['detectable_gain_80']:.3f}"
    return (f"+{gain['discordant']['gained']}/−{gain['discordant']['lost']}, {gain['gain']:+.3f} "
            f"[{low:+.3f}, {high:+.3f}]{flag}, p {gain['p_value']:.2g}, Holm {gain['p_holm']:.2g}, {detects}")
