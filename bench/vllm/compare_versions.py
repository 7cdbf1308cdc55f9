"""One engine's members under two vLLM versions, compared member by member (issue 48 item 4).

bench/vllm/vllm026_h200.sh members runs bench/engines_per_gpu/engines_per_gpu.py once per version, one engine,
the same seeds in the same order (101000, 101001, ...) on the same problems and prompt. A window's members/s alone
mixes the versions with which members fell in the window and with the card's drift between runs; pairing the same
seed's call under both versions removes the first, and running the versions in both orders shows the second.

    python bench/vllm/compare_versions.py --order A1 B1 --order B2 A2 --out bench/results/vllm/vllm_<machine>_<what>.json

Each --order names two engines_per_gpu JSONs in the order they ran. For each the output has the seconds of the
later run's calls over the earlier's (the median over the seeds both ran), whether the two versions gave the same
tokens and correct answers seed by seed, and per version the median ratio of its calls to the other's across the
orders. The verdict: a version is faster only if its calls are shorter in every order.

--by max_tokens compares runs that differ in their cap instead (racing_qwen15b_h200.sh cap: 512, 256, then 512
again, so --order run1 run2 --order run2 run3): the same pairing, and per cap the right answers of the seeds both
ran (a lower cap loses right answers, and a cut answer's last number is now and then the reference).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from randopt.io import write_json_atomic  # noqa: E402
from randopt.population import topk_size  # noqa: E402
from randopt.selection.recall import recall_with_ties  # noqa: E402

# the top-k shares the real-model overlays vote with (config/qwen15b_gsm8k.yaml topk.fractions)
TOP_FRACTIONS = (0.04, 0.1, 0.25)


# the setting the two arms differ in: where a run's JSON holds it, and its name in messages
SETTINGS = {"vllm": ("machine", "vllm", "vLLM"), "max_tokens": ("protocol", "max_tokens", "max_tokens")}


def member_rows(path: Path, by: str = "vllm") -> tuple[str, dict[int, dict]]:
    """(the run's setting `by`, seed -> that seed's row) of a one-engine engines_per_gpu JSON."""
    result = json.loads(path.read_text())
    engines = result["rounds"][0]["per_engine"]
    if len(engines) != 1:
        raise SystemExit(f"{path}: {len(engines)} engines; compare one-engine runs (--ns 1)")
    section, key, _ = SETTINGS[by]
    return str(result[section][key]), {row["seed"]: row for row in engines[0]["rows"]}


def call_seconds(row: dict) -> float:
    """A member's generate call: from its weights switched to its answers back."""
    return row["end"] - row["switched"]


def rank_agreement(first: dict[int, dict], second: dict[int, dict], seeds: list[int]) -> dict:
    """Would the second run select the members the first run selects? Spearman's rank correlation of the
    seeds' right answers, and the second run's top-k list judged by the first run's rewards, ties counted
    (a member tied at the first run's k-th is no miss)."""
    a = pd.Series({s: float(first[s]["correct"]) for s in seeds})
    b = pd.Series({s: float(second[s]["correct"]) for s in seeds})
    recalls = {}
    for fraction in TOP_FRACTIONS:
        k = max(1, topk_size(fraction, len(seeds)))   # the rank stage's k, here of the seeds both runs answered
        kth = a.sort_values(ascending=False).iloc[k - 1]
        listed = b.sort_values(ascending=False, kind="stable").index[:k]
        recalls[f"top {fraction:g} (k={k})"] = recall_with_ties(a[listed].to_numpy(), kth, k)
    return {"spearman": float(a.corr(b, method="spearman")) if len(seeds) > 2 else None,
            "second_top_k_recall_with_ties": recalls}


def compare_order(first: Path, second: Path, by: str = "vllm") -> dict:
    (v1, a), (v2, b) = member_rows(first, by), member_rows(second, by)
    if v1 == v2:
        raise SystemExit(f"{first} and {second} are both {SETTINGS[by][2]} {v1}")
    seeds = sorted(a.keys() & b.keys())
    if not seeds:
        raise SystemExit(f"{first} and {second} share no seed")
    ratios = [call_seconds(b[s]) / call_seconds(a[s]) for s in seeds]
    return {"first": {by: v1, "file": first.name}, "second": {by: v2, "file": second.name},
            "seeds": len(seeds),
            "second_over_first_median": statistics.median(ratios),
            "second_over_first_mean": statistics.fmean(ratios),
            "same_tokens": sum(a[s]["tokens"] == b[s]["tokens"] for s in seeds),
            "same_correct": sum(a[s]["correct"] == b[s]["correct"] for s in seeds),
            "correct": {v1: sum(a[s]["correct"] for s in seeds), v2: sum(b[s]["correct"] for s in seeds)},
            "selection": rank_agreement(a, b, seeds)}


def compare(orders: list[tuple[Path, Path]], by: str = "vllm") -> dict:
    rows = [compare_order(first, second, by) for first, second in orders]
    versions = sorted({r["first"][by] for r in rows} | {r["second"][by] for r in rows})
    if len(versions) != 2:
        raise SystemExit(f"two values of {by} expected, found {versions}")
    # each version's calls over the other's, per order (<1: shorter)
    own = {v: [r["second_over_first_median"] if r["second"][by] == v else 1 / r["second_over_first_median"]
               for r in rows] for v in versions}
    faster = [v for v in versions if all(x < 1 for x in own[v])]
    return {"compared_by": by, "orders": rows,
            "calls_over_other": {v: {"by_order": own[v], "median": statistics.median(own[v])} for v in versions},
            "faster_in_every_order": faster[0] if faster else None,
            "verdict": (f"{SETTINGS[by][2]} {faster[0]} is faster in every order" if faster else
                        "neither is faster in every order: no measured difference")
                       + (" (one order only: the card's drift between two runs is not told apart)"
                          if len(rows) == 1 else "")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--order", nargs=2, type=Path, action="append", required=True, metavar=("FIRST", "SECOND"))
    parser.add_argument("--by", choices=sorted(SETTINGS), default="vllm", help="the setting the runs differ in")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    result = compare(args.order, args.by)
    write_json_atomic(args.out, result)
    for r in result["orders"]:
        print(f"{args.by} {r['first'][args.by]} then {r['second'][args.by]}: the second's calls "
              f"{r['second_over_first_median']:.3f}x the first's over {r['seeds']} seeds, same tokens "
              f"{r['same_tokens']}/{r['seeds']}, right answers {r['correct']}")
    print(result["verdict"])


if __name__ == "__main__":
    main()
