"""What one member's call costs on a vLLM engine against its problems: the measured call-cost curves (a call on m
prompts over one on 128), and the rule that reads a model's value between the measured models. One place for
both users: engines per GPU (randopt/plan/engine_slots.py) and selection.mode auto (randopt/plan/auto_selection.py).

Why a curve and not a line: a vLLM call decodes its prompts together and lasts as long as its longest answer, so
a call on 16 problems costs about half of one on 128, not an eighth (bench/vllm/README.md), and the real 1.5B's
call on 512 problems about twice, not four times (bench/racing/README.md).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from randopt.plan.measurements import section


def between(weight_bytes: float, points: list) -> tuple:
    """The measured models either side of weight_bytes and where it lies between them on a log scale (0: the
    smaller, 1: the larger); outside them, or within 20 % of one (a GGUF's tensor table counts a tied output
    layer twice), the nearest one alone. points: anything with weight_bytes (engine_slots' MEASURED; CALL_COSTS
    here)."""
    points = sorted(points, key=lambda m: m.weight_bytes)
    near = min(points, key=lambda m: abs(math.log(weight_bytes / m.weight_bytes)))
    if abs(math.log(weight_bytes / near.weight_bytes)) < math.log(1.2):
        return near, near, 0.0
    if weight_bytes <= points[0].weight_bytes:
        return points[0], points[0], 0.0
    if weight_bytes >= points[-1].weight_bytes:
        return points[-1], points[-1], 0.0
    low, high = next((a, b) for a, b in zip(points, points[1:]) if a.weight_bytes <= weight_bytes <= b.weight_bytes)
    return low, high, math.log(weight_bytes / low.weight_bytes) / math.log(high.weight_bytes / low.weight_bytes)


@dataclass(frozen=True)
class CallCost:
    """One model's vLLM call-cost curve: a member's seconds on m prompts over its seconds on 128 prompts
    (bench/vllm/vllm_call_cost.py, mode fixed: one engine alone, every answer to max_tokens; where CALL_COSTS
    says so, a run's own calls past 128, bench/racing/job_times.py)."""
    name: str
    weight_bytes: float
    relative: dict[int, float]


# The measured curves (speed_measurements.yaml, with their sources). Past 128 prompts the real 1.5B's curve is its
# real answers in the workflow: a fixed-length curve prices every extra prompt at max_tokens, and interpolating
# between the curves either side made racing at 512 problems look 1.22x faster where it measured 1.02x.
CALL_COSTS = tuple(CallCost(c["name"], float(c["weight_bytes"]), {int(m): float(v) for m, v in c["relative"].items()})
                   for c in section("call_costs"))
REFERENCE_PROMPTS = 128   # the curves' 1.0, and engine_slots' member seconds are quoted on 128 problems


def relative_call(weight_bytes: float, m: float) -> tuple[float, str]:
    """c(m) / c(128) for a vLLM engine, from the measured curves either side of weight_bytes (interpolated on
    log bytes); below the smallest count measured, its value; past the largest, the line through the last two."""
    low, high, at = between(weight_bytes, list(CALL_COSTS))
    value = (1 - at) * _on_curve(low.relative, m) + at * _on_curve(high.relative, m)
    return value, (low.name if low is high else f"between {low.name} and {high.name}")


def _on_curve(curve: dict[int, float], m: float) -> float:
    xs = sorted(curve)
    if m <= xs[-1]:
        return float(np.interp(m, xs, [curve[x] for x in xs]))
    slope = (curve[xs[-1]] - curve[xs[-2]]) / (xs[-1] - xs[-2])
    return curve[xs[-1]] + slope * (m - xs[-1])
