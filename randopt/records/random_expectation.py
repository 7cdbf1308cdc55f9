"""controls.random_members: what a vote of k random members scores in expectation, and the top-k vote against it.

The pool (randopt/selection/random_pool.py) answered the test split. For each top-k list, N_SUBSETS k-subsets
of the pool are drawn with the list's own count at each σ (a seeded draw), each voted exactly as the vote
stage votes (most frequent answer, a tie to the member drawn first; under a task other than GSM8K, right when
the winning member is). The mean of their accuracies estimates the expected accuracy of a σ-matched random
vote of k, their spread says how much one draw moves (issue 68: the old one-draw control jumped 5 problems
between k = 18 and 19), and each problem's share of right subset votes is its expected correctness.

The top-k vote against that expectation: per problem, the top-k vote's correctness (0 or 1) minus the
expected correctness (a share); the gain is their mean, the interval a paired bootstrap over the problems
(as ensemble_gain's), and the p-value a one-sample t-test of the differences against 0 (McNemar's exact test
needs two 0/1 vectors; an expectation is not one).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from randopt.ensemble.majority_vote import answers_match, numeric_key
from randopt.io import InputError
from randopt.records.statistics import BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED

N_SUBSETS = 1000
# Fixed, so that the same answers always give the same expectation.
SUBSET_SEED = 2
# Elements of one chunk's arrays (problems x subsets x k, and x distinct answers): bounds the memory.
CHUNK_ELEMENTS = 16_000_000


def stratified_subsets(list_sigmas: Sequence[float], pool_sigmas: Sequence[float], n_subsets: int,
                       rng: np.random.Generator) -> np.ndarray:
    """(n_subsets x k) indices into the pool: each row holds, at every σ, as many pool members as the list has
    there (drawn without replacement), in a random order (the order breaks the vote's ties)."""
    pool_sigmas = np.asarray(pool_sigmas, dtype=np.float64)
    columns = []
    for sigma in sorted(set(list_sigmas)):
        need = sum(1 for s in list_sigmas if s == sigma)
        at_sigma = np.flatnonzero(pool_sigmas == sigma)
        if at_sigma.size < need:
            raise InputError(f"the random pool has {at_sigma.size} members at σ {sigma}, the top-k list {need}; rerun rank")
        # a random permutation per row, cut at `need`: a draw without replacement for every subset at once
        columns.append(at_sigma[np.argsort(rng.random((n_subsets, at_sigma.size)), axis=1)[:, :need]])
    drawn = np.concatenate(columns, axis=1)
    return np.take_along_axis(drawn, np.argsort(rng.random(drawn.shape), axis=1), axis=1)


def subset_votes(codes: np.ndarray, right: np.ndarray, subsets: np.ndarray) -> np.ndarray:
    """(n_subsets x n_problems) booleans: whether each subset's vote is right on each problem. codes: (n_problems x
    pool) integer answer keys, -1 where a member gave no answer; right: (n_problems x pool) whether that member's
    answer is right. The winner is the most frequent key, a tie going to the subset's first member among the tied."""
    n_problems, (n_subsets, k) = codes.shape[0], subsets.shape
    out = np.empty((n_subsets, n_problems), dtype=bool)
    width = int(codes.max()) + 2   # a slot for "no answer" (-1) and one per distinct answer
    step = max(1, CHUNK_ELEMENTS // (n_subsets * max(k, width)))
    for start in range(0, n_problems, step):
        keys = codes[start:start + step][:, subsets]                    # problems x subsets x k
        valid = keys >= 0
        rows = keys.shape[0] * n_subsets
        # each subset's count of each answer, by one bincount over (problem, subset, answer) slots
        slots = np.arange(rows).reshape(keys.shape[0], n_subsets, 1) * width + keys + 1
        by_answer = np.bincount(slots.ravel(), minlength=rows * width).reshape(keys.shape[0], n_subsets, width)
        counts = np.where(valid, np.take_along_axis(by_answer, keys + 1, axis=-1), 0)   # each member's answer's count
        best = counts.max(-1)
        winner = np.argmax(counts == best[..., None], axis=-1)        # the first among the tied
        won = np.take_along_axis(right[start:start + step][:, subsets], winner[..., None], axis=-1)[..., 0]
        out[:, start:start + step] = (won & (best > 0)).T
    return out


def encode(answers: pd.DataFrame, pool: Sequence[tuple[int, float]], references: Mapping[str, str],
           by_winner: bool) -> tuple[np.ndarray, np.ndarray]:
    """The pool's answers as subset_votes' (codes, right) matrices, problems in references' order. GSM8K: keys and
    rightness by numeric_key and answers_match, as majority_vote pools and matches them; another task: its vote
    keys (the answer column holds them) and each member's own correctness."""
    by_member = {key: frame.set_index("problem_id") for key, frame in answers.groupby(["seed", "sigma"], sort=False)}
    missing = [m for m in pool if m not in by_member]
    if missing:
        raise InputError(f"no test answers for random pool members {missing[:3]}; rerun evaluate_members")
    problems = list(references)
    codes = np.full((len(problems), len(pool)), -1, dtype=np.int64)
    right = np.zeros((len(problems), len(pool)), dtype=bool)
    for j, pid in enumerate(problems):
        seen: dict = {}
        for m, member in enumerate(pool):
            frame = by_member[member]
            answer = frame.at[pid, "answer"] if pid in frame.index else None
            key = answer if by_winner else numeric_key(answer)
            if key is None:
                continue
            codes[j, m] = seen.setdefault(key, len(seen))
            right[j, m] = bool(frame.at[pid, "correct"]) if by_winner else answers_match(answer, references[pid])
    return codes, right


def random_expectation(answers: pd.DataFrame, topk_lists: list[dict], pool: dict, references: Mapping[str, str],
                       by_winner: bool = False, n_subsets: int = N_SUBSETS, seed: int = SUBSET_SEED) -> dict:
    """What the vote stage records of controls.random_members: "random_pool_member_test" (each pool member's test
    accuracy, in the pool's order) and "random_expectation" per top-k list (keyed like ensemble_test): {"k",
    "sigma_counts", "n_subsets", "subset_test" (each subset vote's accuracy), "expected_correct" (per problem, the
    share of subset votes that are right)}."""
    answers = answers.assign(answer=answers["answer"].astype(object).where(answers["answer"].notna(), None))
    members = [(int(m["seed"]), float(m["sigma"])) for m in pool["members"]]
    codes, right = encode(answers, members, references, by_winner)
    rng = np.random.default_rng(seed)
    accuracy = answers.groupby(["seed", "sigma"])["correct"].mean()
    out = {"random_pool_member_test": [{"seed": s, "sigma": g, "test_accuracy": float(accuracy[(s, g)])} for s, g in members],
           # the pool's size at each σ as drawn (below M where a σ has fewer seeds than its share)
           "random_pool_per_sigma": pool.get("per_sigma", {}), "random_expectation": {}}
    for lst in topk_lists:
        sigmas = [float(m["sigma"]) for m in lst["members"]]
        votes = subset_votes(codes, right, stratified_subsets(sigmas, [g for _, g in members], n_subsets, rng))
        out["random_expectation"][repr(lst["fraction"])] = {
            "k": lst["k"], "sigma_counts": {repr(g): sigmas.count(g) for g in sorted(set(sigmas))},
            "n_subsets": n_subsets, "subset_test": votes.mean(axis=1).tolist(),
            "expected_correct": votes.mean(axis=0).tolist()}
    return out


def versus_expectation(correct: Sequence[bool], expected: Sequence[float], *,
                       n_resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED) -> dict:
    """{"gain", "ci95", "p_value", "test", "n_test"} of a vote's per-problem correctness against per-problem
    expected correctness (the module's docstring says how)."""
    from scipy import stats   # imported where used (~0.9 s)
    diff = np.asarray(correct, dtype=np.float64) - np.asarray(expected, dtype=np.float64)
    gain = float(diff.mean())
    if np.ptp(diff) == 0:
        # no spread: every resample has the same mean, and the t statistic is 0/0 or infinite
        low = high = gain
        p_value = 1.0 if gain == 0 else 0.0
    else:
        result = stats.bootstrap((diff,), np.mean, n_resamples=n_resamples, method="percentile",
                                 confidence_level=0.95, rng=np.random.default_rng(seed), batch=1000)
        low, high = float(result.confidence_interval.low), float(result.confidence_interval.high)
        p_value = float(stats.ttest_1samp(diff, 0.0).pvalue)
    return {"gain": gain, "ci95": [low, high], "p_value": p_value, "test": "one-sample t over problems",
            "n_test": int(diff.size)}


def expectation_statistics(vote: dict) -> dict:
    """record["statistics"]["random_expectation"] per top-k fraction: the subset votes' mean accuracy, its sd and
    central 95 % range over the subsets, the pool members' mean test accuracy, and the top-k vote against the
    mean (versus_expectation) with Holm's p over the fractions."""
    from randopt.records.paired import holm
    pool_mean = float(np.mean([m["test_accuracy"] for m in vote["random_pool_member_test"]]))
    out = {}
    for fraction, draw in vote["random_expectation"].items():
        subset_test = np.asarray(draw["subset_test"], dtype=np.float64)
        out[fraction] = {
            "k": draw["k"], "sigma_counts": draw["sigma_counts"], "n_subsets": draw["n_subsets"],
            "pool_members": len(vote["random_pool_member_test"]), "pool_per_sigma": vote.get("random_pool_per_sigma", {}),
            "pool_member_mean_test": pool_mean,
            "mean_test": float(subset_test.mean()), "sd_test": float(subset_test.std(ddof=1)),
            "range95": [float(np.quantile(subset_test, 0.025)), float(np.quantile(subset_test, 0.975))],
            "topk_vs_mean": versus_expectation(vote["ensemble_correct"][fraction], draw["expected_correct"])}
    adjusted = holm({f: entry["topk_vs_mean"]["p_value"] for f, entry in out.items()})
    for fraction, entry in out.items():
        entry["topk_vs_mean"]["p_holm"] = adjusted[fraction]
    return out
