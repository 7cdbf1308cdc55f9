"""Is the GSM8K record's "every sigma-5e-4 member above the base on train" the two stages' paths or the base?

The record scores the base on train in evaluate_members and the members in evaluate_shard. The basecheck part of
h200_qwen15b.sh answers, with the search's own evaluate_shard command, the base (sigma 1e-7: the engines refuse 0)
and members 0..3 at sigma 5e-4. This compares those answers with the run's caches (restored from the lease's
state.tgz) and writes one JSON:

    python bench/real_model/basecheck_compare.py --basecheck DIR --cache-root RESULTS --out FILE

DIR: the basecheck call's $OUT; RESULTS: a run's results/ with shards/<key>/cache and members/<key>/cache.
"""
from __future__ import annotations

import argparse
import glob
import json
import os

import pandas as pd


def one(pattern: str) -> str:
    paths = glob.glob(pattern)
    if len(paths) != 1:
        raise SystemExit(f"expected one file for {pattern}, found {len(paths)}: give the call's $OUT and a run's results/")
    return paths[0]


def identical(a: pd.DataFrame, b: pd.DataFrame) -> float:
    """The share of a's problems whose completion is b's, character for character."""
    b = b.set_index("problem_id")["completion"]
    return float((a["completion"].to_numpy() == b.loc[a["problem_id"]].to_numpy()).mean())


def compare(basecheck: str, cache_root: str) -> dict:
    base_here = pd.read_parquet(one(os.path.join(basecheck, "basecheck_sigma1e-07_*.parquet")))
    members_here = pd.read_parquet(one(os.path.join(basecheck, "basecheck_sigma0.0005_*.parquet")))
    base_train = pd.read_parquet(one(os.path.join(cache_root, "members", "*", "cache", "base.train.parquet")))
    shards = one(os.path.join(cache_root, "shards", "*", "cache"))
    neighbours = pd.concat([pd.read_parquet(p) for p in glob.glob(os.path.join(shards, "sigma=0.0005", "seed=*", "*.parquet"))])
    rewards = neighbours.groupby("seed")["correct"].mean()
    base_rate = float(base_train["correct"].mean())
    return {
        "base_train_evaluate_members": base_rate,
        "base_train_evaluate_shard_sigma_1e-7": {int(s): float(g["correct"].mean()) for s, g in base_here.groupby("seed")},
        "base_completions_identical_across_the_two_paths": {int(s): identical(g, base_train) for s, g in base_here.groupby("seed")},
        "members_sigma_5e-4_here": {int(s): float(g["correct"].mean()) for s, g in members_here.groupby("seed")},
        "members_sigma_5e-4_in_the_run": {int(s): float(rewards[s]) for s in sorted(members_here["seed"].unique())},
        "members_completions_identical_to_the_run": {
            int(s): identical(g, neighbours[neighbours["seed"] == s]) for s, g in members_here.groupby("seed")},
        "neighbourhood_sigma_5e-4": {"members": int(rewards.size), "mean": float(rewards.mean()),
                                     "sd": float(rewards.std(ddof=1)), "min": float(rewards.min()),
                                     "max": float(rewards.max()),
                                     "at_or_below_base": int((rewards <= base_rate).sum())},
        "n_train": int(len(base_train)),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--basecheck", required=True, help="the basecheck call's $OUT (its two parquets)")
    p.add_argument("--cache-root", required=True, help="a run's results/ dir holding the shards' and members' caches")
    p.add_argument("--out", required=True, help="the JSON to write")
    p.add_argument("--note", default="", help="machine, lease, commit: kept in the JSON")
    args = p.parse_args(argv)
    result = {"what": "bench/real_model/basecheck_compare.py", "note": args.note, **compare(args.basecheck, args.cache_root)}
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
