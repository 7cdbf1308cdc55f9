"""rank: all shards of the population -> ranking table (parquet) and top-k lists (JSON)."""
from __future__ import annotations

import argparse
import time

import pandas as pd

from randopt.cli import run_stage
from randopt.io import InputError, atomic_path, write_json_atomic
from randopt.rank import rank_population, top_k


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m scripts.rank", description=__doc__)
    p.add_argument("--shards", nargs="+", required=True, help="evaluate_shard parquet files")
    p.add_argument("--n-seeds", type=int, required=True)
    p.add_argument("--sigmas", type=float, nargs="+", required=True)
    p.add_argument("--fractions", type=float, nargs="+", required=True)
    p.add_argument("--ranking", required=True, help="output parquet")
    p.add_argument("--topk", required=True, help="output JSON")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)

    def body():
        start = time.perf_counter()
        try:
            rows = pd.concat([pd.read_parquet(s, columns=["seed", "sigma", "correct", "n_tokens"])
                              for s in args.shards], ignore_index=True)
        except FileNotFoundError as err:
            raise InputError(f"missing shard: {err.filename}") from err
        ranked = rank_population(rows, args.n_seeds, args.sigmas)
        lists = top_k(ranked, args.fractions)
        with atomic_path(args.ranking) as tmp:
            ranked.to_parquet(tmp, index=False)
        write_json_atomic(args.topk, {"stage": "rank", "population": len(ranked), "n_seeds": args.n_seeds,
                                      "sigmas": args.sigmas, "topk": lists,
                                      "seconds": time.perf_counter() - start})

    return run_stage("rank", body)


if __name__ == "__main__":
    raise SystemExit(main())
