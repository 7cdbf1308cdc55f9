"""Paired comparisons of two per-problem correctness vectors on the same test problems: McNemar's exact
test, the power of that test, and Holm's correction over a family of such tests.

McNemar's exact test looks only at the discordant problems (one side right, the other wrong): under no
difference each falls either way with probability 1/2, so the count of one side's wins is binomial. It is
the primary test of every comparison in a record; the bootstrap interval beside it is a description.

detectable_gain: the smallest gain this design detects with the given power. The design is the number of
test problems n and the observed number of discordant problems D (what a rerun of the same comparison
would see). Conditional on D, the count of problems only B gets right is Binomial(D, pi), and the gain of
B over A is (2 pi - 1) D / n. The exact test at level alpha rejects on a fixed set of counts (those whose
two-sided binomial p is <= alpha); the power at pi is that set's probability. The smallest pi > 1/2 with
power >= the target gives the smallest detectable gain. With D <= 5 no count reaches p <= 0.05, so no gain
is detectable (None).
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

ALPHA = 0.05
POWER = 0.8
# Below this many discordant problems the percentile bootstrap interval of a paired gain is unreliable: with
# 4 to 6 discordant problems it was seen to exclude 0 where the exact p is 0.125 (issue 68).
FEW_DISCORDANT = 10


def discordant(a, b) -> tuple[int, int]:
    """(problems only B gets right, problems only A gets right) of two boolean vectors, same problems, same order."""
    a, b = np.asarray(a, dtype=bool), np.asarray(b, dtype=bool)
    return int(np.sum(b & ~a)), int(np.sum(a & ~b))


def mcnemar_exact_p(only_b: int, only_a: int) -> float:
    """Two-sided exact binomial p of only_b successes in only_b + only_a trials against 1/2 (1.0 with none)."""
    from scipy import stats   # imported where used: ~0.9 s, and the vote stage imports this module's users
    trials = only_b + only_a
    return 1.0 if trials == 0 else min(1.0, float(stats.binomtest(only_b, trials, 0.5).pvalue))


def rejection_counts(trials: int, alpha: float = ALPHA) -> np.ndarray:
    """The counts x in 0..trials whose two-sided exact binomial p (against 1/2) is <= alpha."""
    from scipy import stats
    counts = np.arange(trials + 1)
    # Against 1/2 the two-sided p is twice the smaller tail, capped at 1 (what binomtest computes for p = 1/2).
    tails = np.minimum(stats.binom.cdf(counts, trials, 0.5), stats.binom.sf(counts - 1, trials, 0.5))
    return counts[np.minimum(1.0, 2 * tails) <= alpha]


def exact_power(trials: int, pi: float, alpha: float = ALPHA) -> float:
    """Power of McNemar's exact test with `trials` discordant problems, each won by B with probability pi."""
    from scipy import stats
    return float(stats.binom.pmf(rejection_counts(trials, alpha), trials, pi).sum())


def detectable_gain(n_test: int, n_discordant: int, power: float = POWER, alpha: float = ALPHA) -> float | None:
    """The smallest gain (a fraction of n_test) that McNemar's exact test detects with `power` at two-sided
    `alpha`, with n_discordant discordant problems (the module's docstring says how). None where no gain is
    detectable: too few discordant problems to reject at alpha, or power out of reach."""
    if n_discordant == 0:
        return None
    from scipy import optimize, stats
    region = rejection_counts(n_discordant, alpha)   # fixed for this D: computed once, not per pi

    def shortfall(pi: float) -> float:
        return float(stats.binom.pmf(region, n_discordant, pi).sum()) - power

    if shortfall(1.0) < 0:
        return None
    # Power rises with pi above 1/2 (the rejection set is fixed, and its upper part gains mass): one root.
    pi = optimize.brentq(shortfall, 0.5, 1.0, xtol=1e-12)
    return float((2 * pi - 1) * n_discordant / n_test)


def holm(p_values: Mapping[str, float]) -> dict[str, float]:
    """Holm's step-down adjusted p-values of a family of tests (same keys): the i-th smallest of m p-values is
    multiplied by m - i + 1, kept at least the previous adjusted value, and capped at 1."""
    ordered = sorted(p_values, key=lambda key: p_values[key])
    adjusted, running = {}, 0.0
    for i, key in enumerate(ordered):
        running = max(running, min(1.0, (len(ordered) - i) * p_values[key]))
        adjusted[key] = running
    return adjusted
