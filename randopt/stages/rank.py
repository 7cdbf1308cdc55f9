"""rank: the population's train answers -> ranking table (parquet) and top-k lists (JSON).

Full evaluation reads the evaluate_shard tables; racing reads every round's race_slice tables and the
rounds' decisions (randopt/selection/race_stops.py). Either way the top-k lists hold members that answered every
train problem, and topk.json says what the selection spent (randopt/selection/summary.py)."""
from __future__ import annotations

import time
from functools import partial

import pandas as pd

from randopt.io import InputError, atomic_path, read_json, write_json_atomic
from randopt.selection.summary import selection_summary
from randopt.selection.random_pool import random_pool
from randopt.selection.ranking import random_k, rank_population, top_k
from randopt.runtime.cli import run_stage
from randopt.block_files import object_block
from randopt.stages._args import stage_parser


def parse_args(argv=None):
    p = stage_parser("rank", __doc__)
    p.add_argument("--shards", nargs="+", required=True, help="evaluate_shard (or race_slice) parquet files")
    p.add_argument("--n-seeds", type=int, required=True)
    p.add_argument("--sigmas", type=float, nargs="+", required=True)
    p.add_argument("--fractions", type=float, nargs="+", required=True)
    p.add_argument("--random-vote", type=float, nargs="*", default=[],
                   help="controls.random_vote: fractions whose vote is repeated with k members drawn at random")
    p.add_argument("--random-members", type=int, default=0,
                   help="controls.random_members: members drawn at random, σ-stratified like the top-k lists, whose "
                        "k-subsets' votes give the random vote's expectation (0: none)")
    p.add_argument("--n-train", type=int, required=True, help="problems in the frozen train split")
    p.add_argument("--selection-file", dest="selection", type=object_block, required=True,
                   help="a JSON file holding the config's selection block")
    p.add_argument("--rounds", nargs="*", default=[],
                   help="racing: the race_round survivors files, round 0 first (none for full evaluation)")
    p.add_argument("--ranking", required=True, help="output parquet")
    p.add_argument("--topk", required=True, help="output JSON")
    return p.parse_args(argv)


def run(*, shards: list[str], n_seeds: int, sigmas: list[float], fractions: list[float], n_train: int,
        selection: dict, rounds: list[str], ranking: str, topk: str, random_vote: list[float] = (),
        random_members: int = 0) -> None:
    start = time.perf_counter()
    racing = selection["mode"] == "racing"
    if racing != bool(rounds):
        raise InputError("racing needs the rounds' survivors files (--rounds); full evaluation takes none")
    try:
        rows = pd.concat([pd.read_parquet(s, columns=["seed", "sigma", "correct", "n_tokens"]) for s in shards],
                         ignore_index=True)
    except FileNotFoundError as err:
        raise InputError(f"missing shard: {err.filename}") from err
    ranked = rank_population(rows, n_seeds, sigmas, n_train if racing else None)
    if not racing and int(ranked["n_problems"].iloc[0]) != n_train:
        raise InputError(f"members answered {int(ranked['n_problems'].iloc[0])} train problems, the split has "
                         f"{n_train}: shards from another split were mixed")
    lists = top_k(ranked, fractions)
    reports = [read_json(r)["report"] for r in rounds]
    with atomic_path(ranking) as tmp:
        ranked.to_parquet(tmp, index=False)
    write_json_atomic(topk, {"stage": "rank", "population": len(ranked), "n_seeds": n_seeds, "sigmas": sigmas,
                             "topk": lists, **({"controls": random_k(ranked, random_vote)} if random_vote else {}),
                             **({"random_pool": random_pool(ranked, lists, random_members)} if random_members else {}),
                             "selection": selection_summary(ranked, n_train, selection, reports),
                             "seconds": time.perf_counter() - start})


def main(argv=None) -> int:
    return run_stage("rank", partial(run, **vars(parse_args(argv))))


if __name__ == "__main__":
    raise SystemExit(main())
