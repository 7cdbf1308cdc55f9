"""Racing selection: stop spending train problems on members that can no longer reach the top-k.

Every member answers the same first slice of the train problems; after each slice the members that
are, with high confidence, out of the largest top-k stop; the rest go on with the next slice. The
members still racing after the last slice have answered every train problem and are ranked exactly
as full evaluation ranks them (randopt/selection/ranking.py). A stopped member keeps its partial reward, marked
partial; it is never ranked against complete members.

What is being protected
-----------------------
The target is the full ranking on this train split, not an unknown "true" accuracy: a member is
lost only if it stops although its reward on ALL train problems would have put it in the top-k (a
tie with the k-th counts as in). Two facts make early answers informative about that:

* Random order. plan_rounds visits the problems in a seeded random order, so the m problems a
  member has answered are a simple random sample without replacement of the n. The unseen problems
  are therefore exchangeable with the seen ones and the finite-population correction is exact (after
  all n problems nothing is uncertain).
* Pairing. All members answer the same problems. Members are perturbations of one model and agree
  on most problems, so comparing members problem by problem (against the field's mean answer to that
  problem, or against one another) cancels the problem-difficulty variance that dominates a single
  member's mean.

Two dropping rules (selection.rule)
-----------------------------------
bayes (default): the posterior probability pi_i that member i ends in the top-k, under an
  empirical-Bayes model fitted to the whole field at each checkpoint:
    - score_i = mean over seen problems of (correct_ij - field mean on problem j) (paired with the
      field); its sampling sd is sqrt(s_i^2 / m * (n - m) / (n - 1)) (without replacement), with s_i^2
      the member's per-problem variance, shrunk towards the field's average with PRIOR_PROBLEMS
      pseudo-problems (20 answers say little about one member's variance) and floored at 1/(4m) (no
      disagreement seen in m problems still allows a rate of about 1/m);
    - the members' full-split scores have a common prior, estimated nonparametrically (Kiefer-
      Wolfowitz maximum likelihood on a grid, by EM): the field itself says how far apart members
      really are, so a member in the crowd is judged by how often crowd members end on top, not by
      its own wide interval. This is what successive halving exploits implicitly by keeping a rank
      share; here it is estimated, so wide populations (many broken members) drop many early and
      narrow ones (mostly ties) drop few;
    - pi_i = sum over grid points g of P(score_i = g | data) * P(fewer than k other members score
      above g), the count of others a normal approximation of their independent posterior tails.
  Each decision round drops the members with the smallest pi_i while the dropped pi_i add up to at
  most miss_budget * k / R (R decision rounds): over the race the expected number of full top-k
  members lost is at most miss_budget * k under the model, i.e. the expected recall is at least
  1 - miss_budget. bench/racing/racing_sim.py measures it on synthetic populations (correlated problems,
  narrow and broken populations), where the realised recall lies at or above the budgeted one.
exact: a guarantee without a model, paid for in speed. For a pair (c, i), the problems where they
  disagree decide their difference; given m_d such problems seen, c's wins among them are
  hypergeometric, drawn from the N_d disagreements of the whole split, N_plus of them c's. "c does not
  strictly beat i on the full split" means N_plus <= N_d / 2; its p-value is the largest upper-tail
  probability of c's wins over every N_d the data allow (m_d .. m_d + unseen) with N_plus =
  floor(N_d / 2). Each pair is tested at delta / R per decision round (alpha spending: at most delta
  over the race). Member i stops when at least k members beat it significantly; if i belongs in the
  full top-k, fewer than k members end strictly above it, so at least one of those k verdicts is an
  error of probability at most delta. Pairwise verdicts need many disagreements, so on populations of
  near-identical members this rule stops few members (see bench/results/racing_sim.json). Its p-value tables
  grow with the cube of the split: it takes splits of up to EXACT_MAX_PROBLEMS (1000) problems.

Guards common to both rules: a member whose partial reward is at or above the current k-th
partial reward (ties included) never stops, so at least k members always race to the end; no decision
is taken after the last slice (everything is known there); every (member, problem) pair is evaluated
at most once, since each round's slice is disjoint from every earlier one.

A little over 300 lines, of which this docstring, the rules' derivation, is a quarter.

The rounds themselves (checkpoints, slices, jobs) are planned in randopt/selection/plan.py.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
import pandas as pd

from randopt.io import InputError
from randopt.selection.plan import RacingConfig, checkpoints, decision_rounds, plan_rounds

# rule exact's p-value tables grow with the cube of the split: about 10 s at 1000 problems
EXACT_MAX_PROBLEMS = 1000
PRIOR_PROBLEMS = 20     # pseudo-problems of the field's average variance added to each member's own
GRID_POINTS = 240       # support points of the nonparametric prior
EM_ITERATIONS = 150     # EM steps for the prior's weights (converged well within this on 512 members)


# ------------------------------------------------------------------------------- rule: exact

@lru_cache(maxsize=256)
def _log_factorials(n: int) -> np.ndarray:
    return np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, n + 1)))])


@lru_cache(maxsize=256)
def pvalue_table(n_seen: int, n_problems: int) -> np.ndarray:
    """p[m_d, w]: the largest chance, under "c does not strictly beat i on all n problems", that c
    wins w or more of the m_d discordant problems seen, after n_seen of n_problems problems.

    Worst case over the unknown number N_d of discordant problems in the split (m_d <= N_d <=
    m_d + unseen) with c winning floor(N_d / 2) of them; c's wins among the m_d seen ones are then
    hypergeometric(N_d, floor(N_d/2), m_d). Cached: one table per checkpoint.
    """
    if not 0 <= n_seen <= n_problems:
        raise InputError(f"n_seen={n_seen} must lie in 0..n_problems={n_problems}")
    if n_problems > EXACT_MAX_PROBLEMS:
        # the table costs about n_seen^2 * unseen / 2 terms: seconds at 1000 problems, minutes past 2000
        raise InputError(f"selection.rule exact supports up to {EXACT_MAX_PROBLEMS} train problems, got "
                         f"{n_problems}; use rule bayes, or race on a train split of that size")
    unseen = n_problems - n_seen
    lf = _log_factorials(n_problems)
    table = np.zeros((n_seen + 1, n_seen + 1))
    for m_d in range(n_seen + 1):
        n_d = np.arange(m_d, m_d + unseen + 1)[:, None]  # every population size the data allow
        wins_pop = n_d // 2
        w = np.arange(m_d + 1)[None, :]
        valid = (w <= wins_pop) & (m_d - w <= n_d - wins_pop)
        a, b = np.where(valid, wins_pop, 0), np.where(valid, w, 0)
        c, d = np.where(valid, n_d - wins_pop, 0), np.where(valid, m_d - w, 0)
        log_pmf = (lf[a] - lf[b] - lf[a - b]) + (lf[c] - lf[d] - lf[c - d]) \
            - (lf[n_d] - lf[m_d] - lf[n_d - m_d])
        pmf = np.where(valid, np.exp(log_pmf), 0.0)
        upper_tail = np.cumsum(pmf[:, ::-1], axis=1)[:, ::-1]  # P(wins >= w)
        table[m_d, : m_d + 1] = np.minimum(upper_tail.max(axis=0), 1.0)
    return table


def pairwise_pvalues(correct: np.ndarray, n_problems: int) -> tuple[np.ndarray, np.ndarray]:
    """For members x seen-problems 0/1 answers: p[c, i], the p-value of "c does not strictly beat i
    on the full split", and lead[c, i] = c's correct answers minus i's on the problems seen."""
    x = np.asarray(correct, dtype=np.int64)
    both = x @ x.T                       # problems both members got right
    right = x.sum(axis=1)
    wins = right[:, None] - both         # c right, i wrong
    discordant = wins + wins.T
    table = pvalue_table(x.shape[1], n_problems)
    return table[discordant, wins], right[:, None] - right[None, :]


def beaten_by(correct: np.ndarray, n_problems: int, level: float) -> np.ndarray:
    """How many members beat each member significantly (strict lead seen, p <= level)."""
    p, lead = pairwise_pvalues(correct, n_problems)
    return ((p <= level) & (lead > 0)).sum(axis=0)


# ------------------------------------------------------------------------------- rule: bayes

def _normal_cdf(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.vectorize(math.erf)(np.asarray(z, dtype=float) / math.sqrt(2.0)))


def topk_probabilities(correct: np.ndarray, n_problems: int, k: int) -> np.ndarray:
    """pi_i: the empirical-Bayes posterior probability that member i's full-split reward ends among
    the k best of these members (see the module docstring, rule bayes)."""
    x = np.asarray(correct, dtype=float)
    n_members, m = x.shape
    paired = x - x.mean(axis=0)           # each answer against the field's mean on that problem
    score = paired.mean(axis=1)
    own_var = paired.var(axis=1, ddof=1) if m >= 2 else np.full(n_members, 0.25)
    variance = (m * own_var + PRIOR_PROBLEMS * own_var.mean()) / (m + PRIOR_PROBLEMS)
    variance = np.maximum(variance, 1.0 / (4 * m))
    se = np.sqrt(variance / m * (n_problems - m) / max(n_problems - 1, 1))
    grid = np.linspace(score.min() - 4 * se.max(), score.max() + 4 * se.max(), GRID_POINTS)
    log_lik = -0.5 * ((score[:, None] - grid[None, :]) / se[:, None]) ** 2 - np.log(se)[:, None]
    lik = np.exp(log_lik - log_lik.max(axis=1, keepdims=True))   # rows rescaled: no underflow
    weights = np.full(GRID_POINTS, 1.0 / GRID_POINTS)
    for _ in range(EM_ITERATIONS):        # Kiefer-Wolfowitz NPMLE of the prior by EM
        posterior = lik * weights
        posterior /= posterior.sum(axis=1, keepdims=True)
        weights = posterior.mean(axis=0)
    posterior = lik * weights
    posterior /= posterior.sum(axis=1, keepdims=True)
    above = np.cumsum(posterior[:, ::-1], axis=1)[:, ::-1] - posterior   # P(score_c > g)
    others_mean = above.sum(axis=0)[None, :] - above
    others_var = (above * (1 - above)).sum(axis=0)[None, :] - above * (1 - above)
    # P(fewer than k others above g): normal approximation with continuity correction
    fewer_than_k = _normal_cdf((k - 0.5 - others_mean) / np.sqrt(others_var + 1e-12))
    return np.clip((posterior * fewer_than_k).sum(axis=1), 0.0, 1.0)


def cheapest_drops(pi: np.ndarray, protected: np.ndarray, allowance: float) -> np.ndarray:
    """Drop the least likely members first while their probabilities add up to <= allowance."""
    order = np.argsort(pi, kind="stable")
    order = order[~protected[order]]
    n_drop = int(np.searchsorted(np.cumsum(pi[order]), allowance, side="right"))
    drop = np.zeros(len(pi), dtype=bool)
    drop[order[:n_drop]] = True
    return drop


# ------------------------------------------------------------------------------- decisions

@dataclass
class Verdict:
    """One round's decision on the racing members, in their row order."""
    keep: np.ndarray                     # bool per member
    expected_misses: float | None = None  # bayes: sum of the dropped members' pi


def decide(correct: np.ndarray, k: int, n_problems: int, config: RacingConfig) -> Verdict:
    """Which racing members go on after the problems seen so far.

    correct: racing members x problems seen so far (0/1), every member on the same problems, in the
    plan's order or any order (only the set matters). k: the largest top-k size.
    """
    correct = np.asarray(correct)
    if correct.ndim != 2:
        raise InputError(f"racing needs a members x problems table, got shape {correct.shape}")
    n_members, n_seen = correct.shape
    if not 1 <= k <= n_members:
        raise InputError(f"k={k} must lie in 1..{n_members} (the members still racing); k is the largest "
                         f"top-k size, round(max(topk.fractions) * population)")
    if n_seen > n_problems:
        raise InputError(f"members have answered {n_seen} problems but the split has {n_problems}")
    if not np.isin(correct, (0, 1)).all():
        raise InputError("racing tables hold 0/1 exact-answer correctness; found other values")
    if n_seen >= n_problems:             # every problem seen: nothing left to save, rank exactly
        return Verdict(np.ones(n_members, dtype=bool))
    right = correct.sum(axis=1)
    protected = right >= np.sort(right)[::-1][k - 1]   # at or above the current k-th, ties included
    rounds = decision_rounds(n_problems, config)
    if config.rule == "exact":
        drop = (beaten_by(correct, n_problems, config.delta / rounds) >= k) & ~protected
        return Verdict(~drop)
    pi = topk_probabilities(correct, n_problems, k)
    drop = cheapest_drops(pi, protected, config.miss_budget * k / rounds)
    return Verdict(~drop, float(pi[drop].sum()))


@dataclass
class RoundDecision:
    """survivors()'s answer: who races on, who stops, and the round's line for the record."""
    keep: list[tuple[int, float]]
    dropped: list[tuple[int, float]]
    report: dict = field(default_factory=dict)


def survivors(rows: pd.DataFrame, k: int, config: RacingConfig, n_problems: int) -> RoundDecision:
    """Decide one round from the racing members' rows (columns seed, sigma, problem, correct).

    The rows must hold exactly the racing members' answers to the problems of the rounds so far
    (plan_rounds), every member on every one of them. Returns the members that go on, the ones that
    stop (they keep their partial rewards), and the report for the record: round, problems seen per
    member, members racing/dropped/kept, the problem slots this round's drops save, and (rule bayes)
    the expected number of full top-k members among the dropped.
    """
    missing = {"seed", "sigma", "problem", "correct"} - set(rows.columns)
    if missing:
        raise InputError(f"racing rows lack columns {sorted(missing)}; pass the shard rows of the racing members")
    if rows.empty:
        raise InputError("racing rows are empty: the round's shards wrote no rows")
    duplicated = rows.duplicated(["seed", "sigma", "problem"])
    if duplicated.any():
        first = rows[duplicated].iloc[0]
        raise InputError(f"member seed {int(first.seed)} sigma {first.sigma} has problem {int(first.problem)} "
                         f"twice: shard rows from two rounds overlap; a (member, problem) is evaluated once")
    if not rows["correct"].isin([0, 1]).all():
        raise InputError("racing rows: 'correct' must be 0/1 (exact-answer correctness)")
    table = rows.pivot(index=["seed", "sigma"], columns="problem", values="correct")
    marks = checkpoints(n_problems, config)
    seen = table.shape[1]
    if seen not in marks:
        raise InputError(f"racing members have answered {seen} problems, but the round plan's checkpoints for "
                         f"{n_problems} problems are {marks}: the rows mix rounds or come from another config")
    round_index = marks.index(seen)
    expected = np.sort(np.concatenate(plan_rounds(n_problems, config)[: round_index + 1]))
    if not np.array_equal(np.asarray(table.columns), expected):
        raise InputError(f"the rows' problems are not the plan's first {round_index + 1} slices (order_seed "
                         f"{config.order_seed}): evaluate the slices plan_rounds gives, with the same config")
    if table.isna().any().any():
        member = table.index[table.isna().any(axis=1)][0]
        raise InputError(f"member seed {member[0]} sigma {member[1]} lacks answers to some of the round's "
                         f"problems: every racing member must answer the whole slice before a decision")
    verdict = decide(table.to_numpy(dtype=np.int64), k, n_problems, config)
    members = [(int(s), float(g)) for s, g in table.index]
    kept = [m for m, flag in zip(members, verdict.keep) if flag]
    dropped = [m for m, flag in zip(members, verdict.keep) if not flag]
    report = {"round": round_index, "problems_seen": seen, "members": len(members),
              "dropped": len(dropped), "kept": len(kept), "slots_saved": len(dropped) * (n_problems - seen),
              "rule": config.rule}
    if verdict.expected_misses is not None:
        report["expected_topk_misses"] = verdict.expected_misses
    return RoundDecision(kept, dropped, report)


@dataclass
class RaceResult:
    """race()'s answer on a complete table: who finished, when each member stopped, the rounds."""
    finished: np.ndarray          # bool per member: answered every problem
    problems_seen: np.ndarray     # int per member
    rounds: list[dict]

    @property
    def slots(self) -> int:
        return int(self.problems_seen.sum())


def race(correct: np.ndarray, k: int, config: RacingConfig) -> RaceResult:
    """Run the whole race on a complete members x problems table, reading only what racing would
    evaluate (for simulations and tests; the workflow decides round by round with survivors())."""
    correct = np.asarray(correct)
    n_members, n_problems = correct.shape
    alive = np.ones(n_members, dtype=bool)
    seen = np.zeros(n_members, dtype=np.int64)
    revealed: list[int] = []
    rounds = []
    for index, slice_ in enumerate(plan_rounds(n_problems, config)):
        revealed.extend(slice_.tolist())
        seen[alive] = len(revealed)
        ids = np.flatnonzero(alive)
        verdict = decide(correct[np.ix_(ids, np.sort(revealed))], k, n_problems, config)
        alive[ids[~verdict.keep]] = False
        rounds.append({"round": index, "problems_seen": len(revealed), "members": int(len(ids)),
                       "dropped": int((~verdict.keep).sum()), "slots": int(len(ids) * len(slice_)),
                       "expected_topk_misses": verdict.expected_misses})
    return RaceResult(alive, seen, rounds)
