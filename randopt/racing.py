"""Racing selection: stop spending train problems on members that can no longer reach the top-k.

Every member answers the same first slice of the train problems; after each slice the members that
are, with high confidence, out of the largest top-k stop; the rest go on with the next slice. The
members still racing after the last slice have answered every train problem and are ranked exactly
as full evaluation ranks them (randopt/rank.py). A stopped member keeps its partial reward, marked
partial; it is never ranked against complete members.

The dropping rule (why it is safe)
----------------------------------
The target is the full ranking on this train split, not an unknown "true" accuracy: a member is
lost only if it is stopped although its reward on ALL train problems would have put it in the top-k
(a tie with the k-th counts as in). So the question after m of the n problems is, for a pair of
members c and i: will c's full reward be strictly higher than i's?

* Paired. All members answer the same problems, so only the problems on which c and i disagree can
  change their difference. Members of one population are perturbations of one model and agree on
  most problems, so the discordant problems are few and the paired comparison is much sharper than
  comparing two means (the problem-difficulty variance cancels).
* Exact, with no distributional assumption beyond the order of the problems. plan_rounds visits the
  problems in a seeded random order, so the m problems seen are a simple random sample without
  replacement of the n. Given that m_d of the seen problems are discordant, c's wins among them
  are hypergeometric: drawn from the N_d discordant problems of the whole split, of which N_plus are
  c's. "c does not strictly beat i on the full split" means N_plus <= N_d / 2. The p-value is the
  largest upper-tail probability of c's observed wins over every N_d the data allow (m_d to
  m_d + n - m) with N_plus = floor(N_d / 2), the hardest case of the null. Nothing is
  approximated: the finite population is exact, so near the end of the split, when the unseen
  problems can no longer close a gap, the p-value is exactly 0, and a gap the unseen problems could
  still close is never called certain.
* Alpha spending. Each pairwise comparison is tested at delta / R at each of the R interim
  checkpoints, so over the whole race the comparison errs with probability at most delta.
* Dropping needs k witnesses. Member i stops only when at least k members each beat it
  significantly. If i belongs in the full top-k (ties included), fewer than k members have a strictly
  higher full reward, so at least one of the k witnesses is a comparison that erred; a member deep
  in the top-k needs many errors at once. A witness must also lead i strictly on the problems seen,
  so a member tied with the current k-th (or above it) can never stop, and at least k members
  always race to the end.

Rounds: the checkpoints (problems seen per member) grow geometrically, first_slice, first_slice *
growth, ... up to n, so a round costs about the same as the previous one while the field shrinks and
the late, expensive decisions are taken on many problems. Every (member, problem) pair is evaluated
at most once: a round's slice is disjoint from every earlier slice.

Config block (for config/schema.yaml, under the top level)::

  selection:
    type: object
    additionalProperties: false
    default: {}
    description: >
      How many train problems each member answers. full: every member answers every train problem.
      racing: members answer growing slices and stop once at least k members are significantly
      ahead of them on the problems they share (randopt/racing.py); every top-k list is still
      decided on all train problems.
    properties:
      mode: {type: string, enum: [full, racing], default: full,
             description: "full: every member answers all train problems; racing: members that cannot reach the largest top-k stop early"}
      first_slice: {type: integer, minimum: 1, default: 25,
                    description: "problems every member answers before the first drop decision"}
      growth: {type: number, exclusiveMinimum: 1, default: 2.0,
               description: "each checkpoint (problems seen per member) is growth times the previous one, capped at n_train"}
      delta: {type: number, exclusiveMinimum: 0, exclusiveMaximum: 1, default: 0.1,
              description: "error budget per pair of members over the whole race; smaller keeps more members (safer, slower)"}
      order_seed: {type: integer, minimum: 0, default: 0,
                   description: "seed of the random problem order the slices follow (the bound assumes a random order)"}
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
import pandas as pd

from randopt.io import InputError

DEFAULTS = {"mode": "full", "first_slice": 25, "growth": 2.0, "delta": 0.1, "order_seed": 0}


@dataclass(frozen=True)
class RacingConfig:
    """The racing knobs; see the module docstring's config block for what each one means."""
    first_slice: int = DEFAULTS["first_slice"]
    growth: float = DEFAULTS["growth"]
    delta: float = DEFAULTS["delta"]
    order_seed: int = DEFAULTS["order_seed"]

    def __post_init__(self):
        if isinstance(self.first_slice, bool) or not isinstance(self.first_slice, (int, np.integer)) \
                or self.first_slice < 1:
            raise InputError(f"selection.first_slice must be an integer >= 1, got {self.first_slice!r}")
        if not (isinstance(self.growth, (int, float)) and self.growth > 1 and math.isfinite(self.growth)):
            raise InputError(f"selection.growth must be a number > 1 (checkpoints must grow), got {self.growth!r}")
        if not (isinstance(self.delta, (int, float)) and 0 < self.delta < 1):
            raise InputError(f"selection.delta must lie strictly between 0 and 1, got {self.delta!r}")
        if isinstance(self.order_seed, bool) or not isinstance(self.order_seed, (int, np.integer)) \
                or self.order_seed < 0:
            raise InputError(f"selection.order_seed must be an integer >= 0, got {self.order_seed!r}")

    @classmethod
    def from_selection(cls, selection: dict) -> "RacingConfig":
        """From the config's selection block (mode must be racing; unknown keys are errors)."""
        unknown = sorted(set(selection) - set(DEFAULTS))
        if unknown:
            raise InputError(f"selection has unknown keys {unknown}; the known ones are {sorted(DEFAULTS)}")
        if selection.get("mode", DEFAULTS["mode"]) != "racing":
            raise InputError(f"selection.mode is {selection.get('mode', DEFAULTS['mode'])!r}: racing knobs "
                             f"apply only with mode: racing")
        return cls(**{k: v for k, v in selection.items() if k != "mode"})


def checkpoints(n_problems: int, config: RacingConfig) -> list[int]:
    """Problems seen per racing member after each round: first_slice, *growth, ..., n_problems."""
    if n_problems < 1:
        raise InputError(f"racing needs at least one train problem, got n_problems={n_problems}")
    marks, m = [], float(config.first_slice)
    while round(m) < n_problems:
        if not marks or round(m) > marks[-1]:
            marks.append(int(round(m)))
        m *= config.growth
    # A last slice smaller than half the previous one buys little and costs a round (a job wave):
    # fold it into the previous round.
    if len(marks) >= 2 and n_problems - marks[-1] < (marks[-1] - marks[-2]) / 2:
        marks.pop()
    return marks + [n_problems]


def plan_rounds(n_problems: int, config: RacingConfig) -> list[np.ndarray]:
    """The problem indices each round adds: disjoint slices of a seeded permutation of 0..n-1.

    The slices together hold every problem exactly once. The order is random (seeded by
    config.order_seed) because the bound treats the problems seen so far as a random sample.
    """
    order = np.random.default_rng(config.order_seed).permutation(n_problems)
    marks = [0] + checkpoints(n_problems, config)
    return [np.sort(order[a:b]) for a, b in zip(marks[:-1], marks[1:])]


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
    """For members x seen-problems 0/1 answers: p[c, i] (c beats i on the full split is rejected
    as a null at level p) and lead[c, i] = c's correct answers minus i's on the problems seen."""
    x = np.asarray(correct, dtype=np.int64)
    n_seen = x.shape[1]
    both = x @ x.T                       # problems both members got right
    right = x.sum(axis=1)
    wins = right[:, None] - both         # c right, i wrong
    discordant = wins + wins.T
    table = pvalue_table(n_seen, n_problems)
    return table[discordant, wins], right[:, None] - right[None, :]


def beaten_by(correct: np.ndarray, n_problems: int, level: float) -> np.ndarray:
    """How many members beat each member significantly (strict lead seen, p <= level)."""
    p, lead = pairwise_pvalues(correct, n_problems)
    return ((p <= level) & (lead > 0)).sum(axis=0)


def level_per_checkpoint(n_problems: int, config: RacingConfig) -> float:
    """delta spent evenly over the interim checkpoints (no decision follows the last round)."""
    return config.delta / max(1, len(checkpoints(n_problems, config)) - 1)


def keep_mask(correct: np.ndarray, k: int, n_problems: int, config: RacingConfig) -> np.ndarray:
    """True for the members that race on: fewer than k members beat them significantly.

    correct: racing members x problems seen so far (0/1), every member on the same problems.
    """
    correct = np.asarray(correct)
    n_members = correct.shape[0]
    if not 1 <= k <= n_members:
        raise InputError(f"k={k} must lie in 1..{n_members} (the members still racing); k is the largest "
                         f"top-k size, round(max(topk.fractions) * population)")
    if correct.shape[1] >= n_problems:   # every problem seen: nothing left to save, rank exactly
        return np.ones(n_members, dtype=bool)
    return beaten_by(correct, n_problems, level_per_checkpoint(n_problems, config)) < k


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
    stop (they keep their partial rewards), and the report: round, problems seen per member,
    members before/dropped/kept, and the problem slots this round's drops save.
    """
    missing = {"seed", "sigma", "problem", "correct"} - set(rows.columns)
    if missing:
        raise InputError(f"racing rows lack columns {sorted(missing)}; pass the shard rows of the racing members")
    if rows.duplicated(["seed", "sigma", "problem"]).any():
        first = rows[rows.duplicated(["seed", "sigma", "problem"])].iloc[0]
        raise InputError(f"member seed {int(first.seed)} sigma {first.sigma} has problem {int(first.problem)} "
                         f"twice: shard rows from two rounds overlap; a (member, problem) is evaluated once")
    if not rows["correct"].isin([0, 1, True, False]).all():
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
    keep = keep_mask(table.to_numpy(dtype=np.int64), k, n_problems, config)
    members = [(int(s), float(g)) for s, g in table.index]
    kept = [m for m, flag in zip(members, keep) if flag]
    dropped = [m for m, flag in zip(members, keep) if not flag]
    return RoundDecision(kept, dropped, {
        "round": round_index, "problems_seen": seen, "members": len(members),
        "dropped": len(dropped), "kept": len(kept),
        "slots_saved": len(dropped) * (n_problems - seen)})


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
        keep = keep_mask(correct[np.ix_(ids, np.sort(revealed))], k, n_problems, config)
        alive[ids[~keep]] = False
        rounds.append({"round": index, "problems_seen": len(revealed), "members": int(len(ids)),
                       "dropped": int((~keep).sum()), "slots": int(len(ids) * len(slice_))})
    return RaceResult(alive, seen, rounds)
