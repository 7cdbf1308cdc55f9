"""The order train problems are answered in, and the fixed blocks a batching engine answers them in.

Why blocks: the torch engine's greedy answer to a problem depends on which prompts share its batch.
The batch's padded width and row count change the shapes of its matmuls, so bf16 rounding changes,
and near-tied tokens flip. bench/results/racing_cpu_epyc_zen4.json measured 18.8 % of completions (2.9 % of
correctness) differing between a member's one 64-problem batch and its four racing slices. An answer
cache that mixed the two would make a member's reward depend on which mode asked first.

So every train answer of the torch engine comes from one fixed block: the problems in a seeded random
order (the order racing's slices follow), cut into blocks of engine.batch_size. Full evaluation,
racing, and any mix of the two through the answer cache then batch each problem with the same other
problems and read the same answers. Racing's checkpoints are whole blocks (randopt/selection/plan.py).

vLLM batches continuously: a sequence's neighbours change step by step whatever we submit. SmolLM2's short
answers did not move between full evaluation and racing (bench/results/racing_h200x2.json), but the real
Qwen2.5-Coder-1.5B's answers of hundreds of tokens did: 22.4 % of completions and 3.5 % of correctness between
its 64-problem and 128-problem calls (racing_qwen15b_h100.json). vLLM still gets a single block, so a member's
missing problems go to the engine in one call: blocks would cost full evaluation its one call a member (a call
costs as long as its longest answer, so two calls of 64 cost ~1.3-1.7x one of 128), and each answer is still the
member's greedy answer under one composition. A cache that mixes racing's and full evaluation's answers then
mixes compositions: the two arms' rewards of the same members differed by 1.8 problems of 128 (sd; 39 members in
both top-48 lists). vLLM's batch-invariant mode removes that and costs 1.77x a call on an H100 (bench/vllm/README.md);
the same call repeated gives the same answers without it, so a run that does not switch modes reproduces exactly.
"""
from __future__ import annotations

import numpy as np

from randopt.io import InputError


def problem_order(n_problems: int, order_seed: int) -> np.ndarray:
    """The seeded random order of the train problems (rows of the frozen split): racing's slices are
    consecutive runs of it, and the blocks cut it."""
    return np.random.default_rng(order_seed).permutation(n_problems)


def block_size(engine: dict) -> int | None:
    """Problems per fixed block for an engine config block: the torch engine's batch, or None (one
    block: vLLM, where blocks would cost full evaluation its one call a member; the module's docstring says
    what its answers do between compositions)."""
    return int(engine["batch_size"]) if engine["kind"] == "torch" else None


def blocks(n_problems: int, order_seed: int, size: int | None) -> list[np.ndarray]:
    """The blocks: consecutive runs of problem_order of `size` problems (the last may be shorter)."""
    if size is not None and (int(size) != size or size < 1):
        raise InputError(f"an answer block holds at least one problem, got {size!r}")
    order = problem_order(n_problems, order_seed)
    if size is None:
        return [order]
    return [order[start:start + size] for start in range(0, n_problems, size)]


def group_by_block(problems, answer_blocks: list[np.ndarray]) -> list[list[int]]:
    """The given problems (indices) grouped by the block each belongs to, blocks in order and each
    group in its block's order: one engine call per group."""
    wanted = {int(p) for p in problems}
    groups = [[int(p) for p in block if int(p) in wanted] for block in answer_blocks]
    placed = sum(map(len, groups))
    if placed != len(wanted):
        raise InputError(f"{len(wanted) - placed} problems lie in no answer block (indices beyond the split?)")
    return [g for g in groups if g]
