"""evaluate_members_part: one share of evaluate_members' work, where the run has several engine slots: the
items (randopt/scoring/member_work.py) are dealt over --parts jobs that run side by side, one an engine slot,
and each evaluates the items of its share that are not cached yet into the member cache. evaluate_members then
reads every item from the cache; this job's JSON gives it what was evaluated here, and how long it took.

The deal depends only on the top-k lists, the splits' sizes and --parts, so a killed part's rerun has the same
share and evaluates only what it had not finished.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial

from randopt.engines.base import Engine
from randopt.io import read_json, write_json_atomic
from randopt.runtime.cli import run_stage
from randopt.runtime.engine_args import add_engine_args, engine_from_args, stage_kwargs
from randopt.runtime.log import log
from randopt.scoring.member_cache import lists_answering_test, plan_members
from randopt.scoring.member_evaluation import Splits, evaluate_items
from randopt.scoring.member_work import deal, work_items
from randopt.scoring.scorer import DecodeSpec
from randopt.stages._args import stage_parser


def parse_args(argv=None):
    p = stage_parser("evaluate_members_part", __doc__, "--decode-file", "--test", "--train", "--topk")
    add_engine_args(p)
    p.add_argument("--cache-dir", required=True, help="content-addressed per-member results (evaluate_members')")
    p.add_argument("--base-compositions", type=int, default=1,
                   help="controls.base_compositions: how many batch compositions the base answers the test split in")
    p.add_argument("--part", type=int, required=True, help="this job's share, 0 to --parts - 1")
    p.add_argument("--parts", type=int, required=True, help="the shares the work is dealt into (the engine slots)")
    p.add_argument("--out", required=True, help="JSON: the share's items, what was evaluated of them, the times")
    return p.parse_args(argv)


def run(*, make_engine: Callable[[], Engine], decode: dict, test: str, train: str, topk: str, cache_dir: str,
        base_compositions: int, part: int, parts: int, out: str) -> None:
    if not 0 <= part < parts:
        raise ValueError(f"--part {part} is not one of --parts {parts} (0 to {parts - 1})")
    started_at, start = time.time(), time.perf_counter()
    splits = Splits.read(test, train)
    lists = read_json(topk)
    members, _ = plan_members(lists_answering_test(lists), cache_dir, ".parquet")
    items = work_items(members, base_compositions)
    share = deal(items, parts, splits.sizes())[part]
    log.info("part %d of %d: %d of the %d items", part + 1, parts, len(share), len(items))
    tally = evaluate_items(share, make_engine, DecodeSpec.from_config(decode), splits, cache_dir)
    write_json_atomic(out, {"stage": "evaluate_members_part", "part": part, "parts": parts,
                            "items": [item.label for item in share], "tally": tally.as_json(),
                            "seconds": time.perf_counter() - start,
                            # epoch seconds: whether the parts overlapped, and their wall-clock span
                            "started_at": started_at, "ended_at": time.time()})


def main(argv=None) -> int:
    args = parse_args(argv)
    return run_stage("evaluate_members_part",
                     partial(run, make_engine=partial(engine_from_args, args), **stage_kwargs(args)))


if __name__ == "__main__":
    raise SystemExit(main())
