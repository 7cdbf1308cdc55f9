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


def read_heldout(path) -> tuple[list[str], int]:
    """The held-out slice's texts (verified against its manifest) and their UTF-8 bytes."""
    from randopt.io import InputError, read_jsonl, verify_against_manifest
    verify_against_manifest(path)
    texts = [row["text"] for row in read_jsonl(path, required=("text",))]
    if not texts:
        raise InputError(f"{path}: the held-out slice is empty")
    return texts, sum(len(t.encode("utf-8")) for t in texts)


def heldout_logprobs(engine, texts: list[str], n_bytes: int, max_context: int | None = None) -> np.ndarray:
    """The engine's current weights' fp32 log-probs of every held-out token, in windows of max_context
    tokens (None: the engine's own), checked against the bytes."""
    scored = engine.token_logprobs(texts, max_context)
    if sum(s.n_bytes for s in scored) != n_bytes:
        raise RuntimeError("engine byte count disagrees with the text's UTF-8 length")
    return np.concatenate([s.logprobs for s in scored]).astype(np.float32)
