"""evaluate_members: the base model and every top-k member answer the test split; the base model
also answers the train split (the reference for the members' train rewards). The controls' members
(controls.random_vote) answer the test split too, and the base answers it again in each of its batch
compositions (controls.base_compositions; randopt/scoring/base_compositions.py).

Members already evaluated under the same key are read from the member cache, not evaluated again. Where the
run has several engine slots, part jobs (evaluate_members_part) have evaluated the work between them into the
cache first: this stage then adds up their timings (--parts) and evaluates only what they left, normally nothing.
"""
from __future__ import annotations

import time
from functools import partial
from collections.abc import Callable

import pandas as pd

from randopt.engines.base import Engine
from randopt.scoring.scorer import DecodeSpec
from randopt.io import atomic_path, read_json, write_json_atomic
from randopt.scoring.base_compositions import composition_path, summary as compositions_summary
from randopt.scoring.member_cache import lists_answering_test, member_path, plan_members
from randopt.scoring.member_evaluation import Splits, Tally, evaluate_items
from randopt.scoring.member_work import Item, work_items
from randopt.population import BASE
from randopt.runtime.cli import run_stage
from randopt.runtime.engine_args import add_engine_args, engine_from_args, stage_kwargs
from randopt.stages._args import stage_parser


def parse_args(argv=None):
    p = stage_parser("evaluate_members", __doc__, "--decode-file", "--test", "--topk", "--timings")
    add_engine_args(p)
    p.add_argument("--train", required=True, help="frozen train split (JSONL): the base model answers it too")
    p.add_argument("--base-train-out", required=True,
                   help="JSON: the base model's train accuracy, the reference for the members' train rewards")
    p.add_argument("--cache-dir", required=True, help="content-addressed per-member results")
    p.add_argument("--out", required=True, help="parquet: one row per (member, problem)")
    p.add_argument("--base-compositions", type=int, default=1,
                   help="controls.base_compositions: how many batch compositions the base answers the test split in")
    p.add_argument("--base-compositions-out", required=True,
                   help="JSON: the base's accuracy and per-problem correctness in each composition")
    p.add_argument("--parts", nargs="*", default=[],
                   help="the evaluate_members_part JSONs of this work, whose evaluations --timings adds up")
    return p.parse_args(argv)


def run(*, make_engine: Callable[[], Engine], decode: dict, test: str, train: str, topk: str, cache_dir: str,
        out: str, timings: str, base_train_out: str, base_compositions_out: str, base_compositions: int = 1,
        parts: list[str] = ()) -> None:
    start = time.perf_counter()
    splits = Splits.read(test, train)
    lists = read_json(topk)
    members, _ = plan_members(lists_answering_test(lists), cache_dir, ".parquet")
    done = [read_json(path) for path in parts]
    mine = evaluate_items(work_items(members, base_compositions), make_engine, DecodeSpec.from_config(decode),
                          splits, cache_dir)
    table = pd.concat([pd.read_parquet(member_path(cache_dir, *m, ".parquet")) for m in members], ignore_index=True)
    with atomic_path(out) as tmp:
        table.to_parquet(tmp, index=False)
    correct = pd.read_parquet(Item(BASE, 0.0, split="train").path(cache_dir))["correct"]
    write_json_atomic(base_train_out, {"accuracy": float(correct.mean()), "correct": int(correct.sum()),
                                       "n": int(len(correct))})
    frames = [pd.read_parquet(composition_path(cache_dir, c)) for c in range(1, base_compositions + 1)]
    test_ids = [p["id"] for p in splits.problems["test"]]
    write_json_atomic(base_compositions_out, compositions_summary(frames, test_ids))
    # evaluated, switch_s, ...: this job's and its parts', so that the record counts every evaluation once
    total = Tally.total([part["tally"] for part in done] + [mine.as_json()])
    parted = {"gathered": mine.as_json(), "parts": [{k: v for k, v in part.items() if k != "stage"} for part in done]}
    write_json_atomic(timings, {"stage": "evaluate_members", **total.as_json(), **(parted if done else {}),
                                "seconds": time.perf_counter() - start})


def main(argv=None) -> int:
    args = parse_args(argv)
    return run_stage("evaluate_members", partial(run, make_engine=partial(engine_from_args, args), **stage_kwargs(args)))


if __name__ == "__main__":
    raise SystemExit(main())
