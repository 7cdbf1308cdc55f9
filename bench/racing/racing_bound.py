"""The most any racing rule could save: an oracle's speed-up over full evaluation (issue 17).

An oracle knows every member's full-split reward. It stops every member below the largest top-k's
k-th reward after the first slice and sends the rest (those at or above it, ties included) on to the
end. No rule that keeps every member at or above that reward can do less work with the same first
slice, so its speed-up bounds racing's on that population and plan. Two currencies, because the machines differ in what a member costs:

- slots (member x problem pairs): what a member costs on a CPU, where seconds follow the problems
  answered (bench/results/racing/racing_cpu_*.json: 1.54x the seeds/s for 1.75x fewer slots);
- a call-cost curve c(m), the seconds of one member's call on m problems, measured on the engine
  (bench/vllm/vllm_call_cost.py): on a GPU a member's decode is latency- or bandwidth-bound, so c(m)
  grows far slower than m, and every member pays one call whatever racing decides.

    python bench/racing/racing_bound.py bench/results/racing/racing_cpu_epyc_zen4_blocks.json [more reports...]
    python bench/racing/racing_bound.py --call-cost bench/results/vllm/vllm_h200_call_cost_smollm2.json [--n 128] [--share 0.1]

Both bounds leave out what racing adds and full evaluation does not (a decision job and a wave of
engine starts per round): they are upper bounds on racing's speed-up, not predictions.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from randopt.io import write_json_atomic  # noqa: E402


def checkpoints_of(report: dict) -> list[int]:
    """Problems seen per member after each racing round (the racing arm's record)."""
    rounds = report["arms"]["racing"]["selection"]["rounds"]
    return [int(r["problems_seen"]) for r in rounds]


def oracle_slots(population: int, n_train: int, first: int, kept: int) -> int:
    """Slots of the oracle: everyone answers the first slice; the kept members answer everything."""
    if not 0 < first <= n_train:
        raise ValueError(f"the first checkpoint {first} must lie in 1..{n_train}")
    if not 0 <= kept <= population:
        raise ValueError(f"{kept} members kept of a population of {population}")
    return population * first + kept * (n_train - first)


def report_bound(report: dict) -> dict:
    """The oracle's slots on a bench/racing/racing.py report's population and racing plan, beside what
    full evaluation and racing spent and the seconds each arm took."""
    population, n_train = int(report["population"]), int(report["n_train"])
    largest = max(report["recall"], key=lambda f: report["recall"][f]["k"])
    kept = int(report["recall"][largest]["members_at_or_above_kth"])
    first = checkpoints_of(report)[0]
    full, racing = report["arms"]["full"], report["arms"]["racing"]
    slots_oracle = oracle_slots(population, n_train, first, kept)
    slots_full, slots_racing = int(full["slots_evaluated"]), int(racing["slots_evaluated"])
    seconds_ratio = full["search_wall_s"] / racing["search_wall_s"]
    slot_ratio = slots_full / slots_racing
    # On a GPU seconds do not follow slots (a call on fewer problems costs far more than its share):
    # the slot bound still holds, but its seconds are the call-cost curve's to estimate.
    on_gpu = bool(report.get("machine", {}).get("gpus"))
    return {
        "population": population, "n_train": n_train, "first_checkpoint": first,
        "k_protected": int(report["recall"][largest]["k"]), "members_at_or_above_kth": kept,
        "slots": {"full": slots_full, "racing": slots_racing, "oracle": slots_oracle},
        "slot_speedup": {"racing": slot_ratio, "oracle": slots_full / slots_oracle},
        # Share of the oracle's saving racing made: 1.0 = the rule lost nothing to caution (None: the
        # oracle saves nothing, e.g. every member ties at the cut).
        "share_of_oracle_saving": ((slots_full - slots_racing) / (slots_full - slots_oracle)
                                   if slots_full > slots_oracle else None),
        "seconds_speedup_measured": seconds_ratio,
        # Seconds per slot in racing against full (1.0: seconds follow slots exactly); the oracle's
        # seconds estimated at racing's efficiency.
        "seconds_per_slot_efficiency": seconds_ratio / slot_ratio,
        "oracle_seconds_speedup_at_racing_efficiency": (None if on_gpu else
                                                        seconds_ratio / slot_ratio * slots_full / slots_oracle),
        "gpus": report.get("machine", {}).get("gpus", []),
    }


def share_text(bound: dict) -> str:
    share = bound["share_of_oracle_saving"]
    return "the oracle saves nothing" if share is None else f"{share:.0%} of its saving"


def interpolate(curve: dict[int, float], m: float) -> float:
    """c(m) by linear interpolation between measured problem counts (no extrapolation)."""
    xs = sorted(curve)
    if not xs[0] <= m <= xs[-1]:
        raise ValueError(f"{m} problems lies outside the measured {xs[0]}..{xs[-1]}")
    return float(np.interp(m, xs, [curve[x] for x in xs]))


def call_bound(curve: dict[int, float], n: int, first: int, share_kept: float) -> float:
    """Full evaluation's seconds over the oracle's, two rounds: every member one call on `first`
    problems, the kept share one more on the other n - first (c interpolated; c(0) is no call)."""
    rest = interpolate(curve, n - first) if n > first else 0.0
    return interpolate(curve, n) / (interpolate(curve, first) + share_kept * rest)


def call_cost_table(cost: dict, n: int | None, shares: list[float]) -> dict:
    """The oracle's best two-round speed-up per share of the population kept, from one measured
    curve per mode/sigma in a bench/vllm/vllm_call_cost.py report."""
    out = {}
    for label, rows in cost["curves"].items():
        curve = {int(m): float(r["call_s_median"]) for m, r in rows.items()}
        n_full = n or max(curve)
        firsts = [m for m in sorted(curve) if m < n_full and n_full - m >= min(curve)]
        out[label] = {
            "n": n_full,
            "call_s": {m: curve[m] for m in sorted(curve)},
            "c_ratio_to_n": {m: curve[m] / interpolate(curve, n_full) for m in sorted(curve) if m <= n_full},
        }
        best = {repr(share): max(((call_bound(curve, n_full, f, share), f) for f in firsts), default=(math.nan, None))
                for share in shares}
        out[label]["oracle_speedup"] = {share: b[0] for share, b in best.items()}
        out[label]["oracle_best_first"] = {share: b[1] for share, b in best.items()}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python bench/racing/racing_bound.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("reports", nargs="*", help="bench/racing/racing.py reports (JSON)")
    parser.add_argument("--call-cost", nargs="*", default=[], help="bench/vllm/vllm_call_cost.py reports (JSON)")
    parser.add_argument("--n", type=int, default=None, help="the train split for the call-cost bound "
                        "(default: the largest problem count measured)")
    parser.add_argument("--share", type=float, nargs="+", default=[0.05, 0.1, 0.25],
                        help="shares of the population at or above the k-th reward (the oracle keeps them)")
    parser.add_argument("--out", default=None, help="write the bounds here as JSON")
    args = parser.parse_args(argv)
    try:
        result = bounds(args)
    except (ValueError, KeyError, OSError) as err:
        print(f"error: {err!s}" if not isinstance(err, KeyError) else
              f"error: a report lacks {err}: give bench/racing/racing.py reports and bench/vllm/vllm_call_cost.py results",
              file=sys.stderr)
        return 2
    if args.out:
        write_json_atomic(Path(args.out), result)
    return 0


def bounds(args) -> dict:
    """Every report's and every curve's bound, printed a line each."""
    result = {"reports": {}, "call_cost": {}}
    for path in args.reports:
        b = result["reports"][Path(path).name] = report_bound(json.loads(Path(path).read_text()))
        print(f"{Path(path).name}: {b['population']} members, n {b['n_train']}, first checkpoint {b['first_checkpoint']}, "
              f"{b['members_at_or_above_kth']} at or above the k-th of k {b['k_protected']}: slots {b['slot_speedup']['racing']:.2f}x "
              f"racing, {b['slot_speedup']['oracle']:.2f}x oracle ({share_text(b)}); "
              f"seconds {b['seconds_speedup_measured']:.2f}x measured, "
              + (f"oracle ~{b['oracle_seconds_speedup_at_racing_efficiency']:.2f}x at racing's seconds per slot"
                 if b["oracle_seconds_speedup_at_racing_efficiency"] is not None
                 else "on GPUs: the oracle's seconds need a call-cost curve (--call-cost)"))
    for path in args.call_cost:
        table = result["call_cost"][Path(path).name] = call_cost_table(json.loads(Path(path).read_text()), args.n, args.share)
        for label, t in table.items():
            ratios = ", ".join(f"{m}: {r:.2f}" for m, r in t["c_ratio_to_n"].items())
            best = ", ".join(f"keep {s}: {v:.2f}x (first {t['oracle_best_first'][s]})" for s, v in t["oracle_speedup"].items())
            print(f"{Path(path).name} {label}: c(m)/c({t['n']}) {ratios}; oracle, two rounds: {best}")
    return result


if __name__ == "__main__":
    sys.exit(main())
