"""controls.base_compositions: the base model answers the test split again, each time in another batch
composition, to measure how far its accuracy moves for reasons that are not the weights.

A greedy answer of hundreds of tokens can diverge with the batch it decodes in (other sequences change the
kernels' shapes and reduction orders), so a member at a small sigma is partly the base decoded again. The base's
one evaluation is one draw; these are more draws of the same weights.

Composition 1 is the base's own evaluation (the test problems in their order, one call). Composition c > 1
decodes the problems in a permutation seeded by c, in c calls of near-equal size. Each is cached beside the
members (base.composition=<c>.parquet), under the same eval key.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from randopt.population import BASE
from randopt.scoring.member_cache import member_path


def composition_batches(n_problems: int, composition: int) -> list[list[int]] | None:
    """The generate calls of composition `composition` (positions in the test split, one list a call); None
    for composition 1 (one call, the split's order, as every member is evaluated)."""
    if composition < 1:
        raise ValueError(f"composition {composition}: compositions count from 1")
    if composition == 1:
        return None
    order = np.random.default_rng(composition).permutation(n_problems)
    return [chunk.tolist() for chunk in np.array_split(order, min(composition, n_problems)) if chunk.size]


def composition_path(cache_dir, composition: int):
    """Composition 1 is the base's own cached test answers; the others have their own files."""
    suffix = ".parquet" if composition == 1 else f".composition={composition}.parquet"
    return member_path(cache_dir, BASE, 0.0, suffix)


def in_test_order(frame: pd.DataFrame, problem_ids: list[str]) -> pd.DataFrame:
    """A composition's rows (in its calls' order) back in the test split's order."""
    return frame.set_index("problem_id").loc[problem_ids].reset_index()


def summary(frames: list[pd.DataFrame], problem_ids: list[str]) -> dict:
    """base_compositions.json: per composition (1 first) its calls, accuracy and per-problem correctness, in
    the test split's order."""
    out = []
    for c, frame in enumerate(frames, start=1):
        correct = in_test_order(frame, problem_ids)["correct"].astype(bool).tolist()
        batches = composition_batches(len(problem_ids), c)
        out.append({"composition": c, "calls": 1 if batches is None else len(batches),
                    "accuracy": float(np.mean(correct)), "correct": correct})
    return {"problem_ids": problem_ids, "compositions": out}
