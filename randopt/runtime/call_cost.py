"""What one member's call costs on a vLLM engine against its problems: the measured call-cost curves (a call on m
prompts over one on 128), and the rule that reads a model's value between the measured models. One place for
both users: engines per GPU (randopt/runtime/engine_slots.py) and selection.mode auto (randopt/selection/auto.py).

Why a curve and not a line: a vLLM call decodes its prompts together and lasts as long as its longest answer, so
a call on 16 problems costs about half of one on 128, not an eighth (bench/vllm/README.md), and the real 1.5B's
call on 512 problems about twice, not four times (bench/racing/README.md).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


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


CALL_COSTS = (
    # bench/results/vllm_h200_call_cost_smollm2.json (8-256 prompts, 64 tokens) and, past 256, _smollm2_to512.json
    # joined at 256 (its 384 and 512 relative to its own 256, times this curve's)
    CallCost("SmolLM2-135M-Instruct", 0.27e9, {8: 0.4782, 16: 0.5205, 32: 0.6046, 64: 0.7492, 128: 1.0, 256: 1.6047,
                                              384: 2.7010, 512: 3.2490}),
    # The real Qwen2.5-Coder-1.5B, the one real model measured: to 128 prompts bench/results/
    # vllm_h100_call_cost_qwen15b.json (one engine alone on an H100, every answer to 512 tokens); past 128 its
    # real answers in the workflow, three engines under MPS on an H100 (racing_qwen15b_512_h100_together_jobs.json:
    # a member's call on 256 and 512 problems over one on 128, the jobs side by side). Past 128 a fixed-length
    # curve prices every extra prompt at max_tokens: this model's answers average ~120 of 512 tokens, so 512
    # problems cost 1.97x of 128, not the ~3.2x of the curves either side, and the interpolation between them
    # made racing at 512 problems look 1.22x faster where it measured 1.02x (docs/racing.md).
    CallCost("Qwen2.5-Coder-1.5B-Instruct", 3.09e9, {8: 0.4917, 16: 0.4849, 20: 0.5114, 32: 0.5868, 40: 0.6277,
                                                    48: 0.6626, 64: 0.6726, 96: 0.8549, 128: 1.0, 256: 1.2387,
                                                    512: 1.9663}),
    # bench/results/vllm_h200_call_cost_qwen7b.json: the random Qwen2.5-7B shape, 256 tokens
    CallCost("Qwen2.5-7B shape", 15.2e9, {8: 0.6799, 16: 0.6935, 32: 0.7332, 64: 0.8083, 128: 1.0, 256: 1.5855}),
)
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
