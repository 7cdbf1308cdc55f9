"""Bits per byte (docs/design.md, "Scoring"): bpb = sum of token NLL in nats / (ln 2 * UTF-8 bytes).

The ensemble's probability of each realized token is the mean of its members' probabilities,
accumulated over members in float64 (log-sum-exp, so no member's tiny probability underflows).
"""
from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np


def bits_per_byte(nll_nats: float, n_bytes: int) -> float:
    if n_bytes <= 0:
        raise ValueError(f"n_bytes must be positive, got {n_bytes}")
    return float(nll_nats) / (math.log(2) * n_bytes)


def model_bpb(logprobs: np.ndarray, n_bytes: int) -> float:
    return bits_per_byte(-float(np.sum(logprobs, dtype=np.float64)), n_bytes)


def ensemble_logprobs(member_logprobs: Iterable[np.ndarray]) -> np.ndarray:
    """log(mean_m p_m) per token, streaming over members: one running log-sum in float64."""
    total, count = None, 0
    for lp in member_logprobs:
        lp = np.asarray(lp, dtype=np.float64)
        total = lp.copy() if total is None else np.logaddexp(total, lp)
        count += 1
    if count == 0:
        raise ValueError("an ensemble needs at least one member")
    return total - math.log(count)
