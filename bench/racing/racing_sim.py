"""Racing against full evaluation and plain successive halving on synthetic populations.

Each member answers each train problem right or wrong. The populations imitate RandOpt's: members
are perturbations of one model, so they agree on most problems, and problems differ in difficulty,
so a member's answers are correlated with every other member's. Correctness is a latent threshold:

    correct[i, j] = 1[ easiness_j + skill_i + noise * e_ij > 0 ],   e_ij ~ N(0, 1)

easiness_j ~ N(mu, 1) sets the base accuracy (mu is solved for it); noise sets how often two members
disagree on a problem; skill_i is the member's true offset (a narrow normal for small sigma, a mixture
of broken and intact members for large sigma). Reported beside every scenario: the members' reward
spread (mean, sd, best, k-th), how often two members disagree on a problem, and how many tie the k-th.

Compared, on the same tables and the same random problem order:
  full    every member answers every problem (speedup 1, recall 1);
  sh      plain successive halving: all members answer first_slice problems, the best keep_fraction
          by partial reward (at least k) go on, the problems seen grow by 1/keep_fraction, until the
          survivors have answered all problems;
  racing  randopt/selection/race_stops.py, rule bayes at several (growth, miss_budget) and rule exact at several
          delta (first_slice 20).
speedup = (members * problems) / (member-problem slots evaluated); recall = share of the racing
top-k whose full reward is at least the full ranking's k-th reward (ties at the cut count as in).

    python bench/racing/racing_sim.py --out DIR [--reps 20]
"""
from __future__ import annotations

import argparse
import itertools
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from randopt.io import write_json_atomic  # noqa: E402
from randopt.selection.plan import RacingConfig, plan_rounds  # noqa: E402
from randopt.selection.race_stops import race  # noqa: E402
from randopt.selection.recall import kth_reward, recall_with_ties  # noqa: E402

N_MEMBERS, N_PROBLEMS, K = 512, 200, 20

# name -> (base accuracy, member-problem noise, skill sampler). The narrow ones span the measured
# reward sd of SmolLM2 at sigma <= 4e-3 (0.015-0.033: mostly ties); the wide ones imitate sigma
# 8e-3 and 1.6e-2, where many members break to near-zero accuracy and a few stay good.
SCENARIOS = {
    "narrow_sd015": dict(base=0.3, noise=0.25, skill=("normal", 0.02)),
    "narrow_sd033": dict(base=0.3, noise=0.35, skill=("normal", 0.08)),
    "narrow_lowcorr": dict(base=0.3, noise=0.8, skill=("normal", 0.05)),
    "wide_sigma8e-3": dict(base=0.3, noise=0.35, skill=("mixture", 0.5, 0.10)),
    "wide_sigma1.6e-2": dict(base=0.3, noise=0.35, skill=("mixture", 0.9, 0.15)),
}

DEFAULT = RacingConfig()   # the config the schema block ships (rule bayes)
RACING_GRID = ([dict(rule="bayes", growth=g, miss_budget=b)
                for g, b in itertools.product([1.5, 2.0], [0.02, 0.05, 0.1, 0.2, 0.3, 0.4])]
               + [dict(rule="exact", growth=2.0, delta=d) for d in [0.05, 0.2, 0.5]])
SH_GRID = [dict(first_slice=f, keep_fraction=q)
           for f, q in itertools.product([5, 10, 15, 20, 25, 30, 40, 50, 60, 70, 100], [0.5, 1 / 3, 0.25])]


def _norm_ppf(p: float) -> float:
    """Inverse standard normal CDF by bisection on erf (no scipy needed for one number)."""
    lo, hi = -10.0, 10.0
    for _ in range(100):
        mid = (lo + hi) / 2
        if 0.5 * (1 + math.erf(mid / math.sqrt(2))) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def sample_table(scenario: dict, rng: np.random.Generator) -> np.ndarray:
    """One population's members x problems 0/1 correctness table."""
    noise = scenario["noise"]
    mu = _norm_ppf(scenario["base"]) * math.sqrt(1 + noise ** 2)  # P(correct) = base for skill 0
    easiness = rng.normal(mu, 1.0, N_PROBLEMS)
    kind, *args = scenario["skill"]
    if kind == "normal":
        skill = rng.normal(0.0, args[0], N_MEMBERS)
    else:  # a share of members broken (accuracy near 0), the rest intact with a spread
        broken_share, spread = args
        broken = rng.random(N_MEMBERS) < broken_share
        skill = np.where(broken, -rng.uniform(1.0, 4.0, N_MEMBERS), rng.normal(0.0, spread, N_MEMBERS))
    latent = easiness[None, :] + skill[:, None] + noise * rng.standard_normal((N_MEMBERS, N_PROBLEMS))
    return (latent > 0).astype(np.int8)


def finished_recall(rewards: np.ndarray, finished: np.ndarray, k: int) -> float:
    """Recall with ties (randopt/selection/recall.py) of the racing top-k, the best k finished members."""
    return recall_with_ties(np.sort(rewards[finished])[::-1][:k], kth_reward(rewards, k), k)


def successive_halving(table: np.ndarray, k: int, first_slice: int, keep_fraction: float,
                       order: np.ndarray) -> tuple[np.ndarray, int]:
    """Plain successive halving: keep the best keep_fraction by partial reward (at least k)."""
    n_members, n_problems = table.shape
    alive = np.arange(n_members)
    seen, slots = 0, 0
    target = first_slice
    while True:
        target = min(int(round(target)), n_problems)
        slots += len(alive) * (target - seen)
        seen = target
        if seen >= n_problems:
            break
        partial = table[np.ix_(alive, order[:seen])].sum(axis=1)
        n_keep = max(k, math.ceil(keep_fraction * len(alive)))
        # stable sort on the negated score: ties at the cut go to the lower member index ("plain")
        alive = alive[np.argsort(-partial, kind="stable")[:n_keep]]
        target = seen / keep_fraction
    finished = np.zeros(n_members, dtype=bool)
    finished[alive] = True
    return finished, slots


def describe(table: np.ndarray, k: int, rng: np.random.Generator) -> dict:
    rewards = table.mean(axis=1)
    ordered = np.sort(rewards)[::-1]
    pairs = rng.integers(0, table.shape[0], (2000, 2))
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    disagree = (table[pairs[:, 0]] != table[pairs[:, 1]]).mean()
    return {"reward_mean": float(rewards.mean()), "reward_sd": float(rewards.std(ddof=1)),
            "reward_best": float(ordered[0]), "reward_kth": float(ordered[k - 1]),
            "members_at_or_above_kth": int((rewards >= ordered[k - 1]).sum()),
            "members_tied_with_kth": int((rewards == ordered[k - 1]).sum()),
            "pair_disagreement_rate": float(disagree)}


def summarize(runs: list[dict]) -> dict:
    recalls = [r["recall"] for r in runs]
    speedups = [r["speedup"] for r in runs]
    summary = {"speedup_mean": statistics.fmean(speedups), "speedup_min": min(speedups),
               "recall_mean": statistics.fmean(recalls), "recall_min": min(recalls),
               "recall_sd": statistics.stdev(recalls) if len(recalls) > 1 else 0.0}
    if "expected_misses" in runs[0]:
        summary["expected_misses_mean"] = statistics.fmean(r["expected_misses"] for r in runs)
        summary["dropped_at_or_above_kth_mean"] = statistics.fmean(r["dropped_at_or_above_kth"] for r in runs)
    return summary


def frontier(rows: list[dict]) -> list[dict]:
    """The Pareto-best rows: none other has both more speedup and more mean recall."""
    best = []
    for row in sorted(rows, key=lambda r: (-r["speedup_mean"], -r["recall_mean"])):
        if not best or row["recall_mean"] > best[-1]["recall_mean"]:
            best.append(row)
    return best


def best_recall_at(rows: list[dict], speedup: float) -> dict | None:
    """The row with the highest mean recall (then speedup) among those at least `speedup` times faster."""
    fast = [r for r in rows if r["speedup_mean"] >= speedup]
    return max(fast, key=lambda r: (r["recall_mean"], r["speedup_mean"])) if fast else None


def fastest_at(rows: list[dict], recall: float) -> dict | None:
    """The fastest row whose mean recall is at least `recall`."""
    good = [r for r in rows if r["recall_mean"] >= recall]
    return max(good, key=lambda r: r["speedup_mean"]) if good else None


def run(reps: int, seed: int) -> dict:
    results = {}
    total_slots = N_MEMBERS * N_PROBLEMS
    for s_index, (name, scenario) in enumerate(SCENARIOS.items()):
        racing_runs = {i: [] for i in range(len(RACING_GRID))}
        sh_runs = {i: [] for i in range(len(SH_GRID))}
        stats = []
        for rep in range(reps):
            rng = np.random.default_rng([seed, s_index, rep])
            table = sample_table(scenario, rng)
            rewards = table.mean(axis=1)
            stats.append(describe(table, K, rng))
            for i, knobs in enumerate(RACING_GRID):
                # a fresh problem order per repetition, as a fresh train split would give
                config = RacingConfig(order_seed=rep, **knobs)
                result = race(table, K, config)
                # calibration of rule bayes: the misses it expected against the members it dropped
                # whose full reward is at or above the full k-th (the event pi_i is about)
                at_or_above = rewards >= np.sort(rewards)[::-1][K - 1]
                racing_runs[i].append({"speedup": total_slots / result.slots,
                                       "recall": finished_recall(rewards, result.finished, K),
                                       "expected_misses": sum(r["expected_topk_misses"] or 0.0 for r in result.rounds),
                                       "dropped_at_or_above_kth": int((at_or_above & ~result.finished).sum())})
            order = np.concatenate(plan_rounds(N_PROBLEMS, RacingConfig(first_slice=N_PROBLEMS, order_seed=rep)))
            for i, knobs in enumerate(SH_GRID):
                finished, slots = successive_halving(table, K, knobs["first_slice"], knobs["keep_fraction"], order)
                sh_runs[i].append({"speedup": total_slots / slots, "recall": finished_recall(rewards, finished, K)})
        racing_rows = [{**RACING_GRID[i], **summarize(r)} for i, r in racing_runs.items()]
        bayes_rows = [r for r in racing_rows if r["rule"] == "bayes"]
        exact_rows = [r for r in racing_rows if r["rule"] == "exact"]
        sh_rows = [{**SH_GRID[i], **summarize(r)} for i, r in sh_runs.items()]
        population = {key: statistics.fmean(s[key] for s in stats) for key in stats[0]}
        results[name] = {
            "scenario": {**scenario, "skill": list(scenario["skill"])}, "population_mean_over_reps": population,
            "racing": racing_rows, "successive_halving": sh_rows,
            "default_config": next(r for r in racing_rows if r["rule"] == DEFAULT.rule and
                                   r["growth"] == DEFAULT.growth and r["miss_budget"] == DEFAULT.miss_budget),
            "bayes_frontier": frontier(bayes_rows), "exact_frontier": frontier(exact_rows),
            "sh_frontier": frontier(sh_rows),
            "best_recall_at_2x": {"racing_bayes": best_recall_at(bayes_rows, 2.0),
                                  "racing_exact": best_recall_at(exact_rows, 2.0),
                                  "successive_halving": best_recall_at(sh_rows, 2.0)},
            "fastest_at_recall_0.95": {"racing_bayes": fastest_at(bayes_rows, 0.95),
                                       "racing_exact": fastest_at(exact_rows, 0.95),
                                       "successive_halving": fastest_at(sh_rows, 0.95)},
            "fastest_at_recall_0.9": {"racing_bayes": fastest_at(bayes_rows, 0.9),
                                      "racing_exact": fastest_at(exact_rows, 0.9),
                                      "successive_halving": fastest_at(sh_rows, 0.9)},
        }
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="directory for racing_sim.json")
    parser.add_argument("--reps", type=int, default=20, help="populations per scenario (fixed seeds)")
    parser.add_argument("--seed", type=int, default=17, help="master seed of the synthetic populations")
    args = parser.parse_args(argv)
    if args.reps < 1:
        parser.error("--reps must be >= 1")
    started = time.time()
    results = run(args.reps, args.seed)
    out = Path(args.out) / "racing_sim.json"
    write_json_atomic(out, {"members": N_MEMBERS, "problems": N_PROBLEMS, "k": K, "reps": args.reps,
                            "seed": args.seed, "racing_grid": RACING_GRID, "sh_grid": SH_GRID,
                            "wall_s": round(time.time() - started, 1), "scenarios": results})
    for name, res in results.items():
        pop = res["population_mean_over_reps"]
        print(f"{name}: reward {pop['reward_mean']:.3f} sd {pop['reward_sd']:.3f} kth {pop['reward_kth']:.3f} "
              f"disagree {pop['pair_disagreement_rate']:.3f} tied@k {pop['members_tied_with_kth']:.1f}")
        row = res["default_config"]
        print(f"  {'racing default':>18}: recall {row['recall_mean']:.3f} (min {row['recall_min']:.2f}) at "
              f"{row['speedup_mean']:.2f}x")
        for method in ("racing_bayes", "racing_exact", "successive_halving"):
            row = res["best_recall_at_2x"][method]
            print(f"  {method:>18} best recall at >=2x: " + (
                "none" if row is None else f"{row['recall_mean']:.3f} (min {row['recall_min']:.2f}) at "
                f"{row['speedup_mean']:.2f}x {({k: v for k, v in row.items() if k in ('first_slice', 'growth', 'miss_budget', 'delta', 'keep_fraction')})}"))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
