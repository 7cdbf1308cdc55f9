"""evaluate_members: the base model and every top-k member answer the test split; the base model
also answers the train split (the reference for the members' train rewards). The controls' members
(controls.random_vote) answer the test split too, and the base answers it again in each of its batch
compositions (controls.base_compositions; randopt/scoring/base_compositions.py).

Members already evaluated under the same key are read from the member cache, not evaluated again.
"""
from __future__ import annotations

import time
from functools import partial
from collections.abc import Callable

import pandas as pd

from randopt.runtime.log import log
from randopt.engines.base import Engine
from randopt.scoring.scorer import DecodeSpec, build_prompts, evaluate_weights
from randopt.io import atomic_path, read_json, read_jsonl, verify_against_manifest, write_json_atomic
from randopt.engines.switch import engine_drift
from randopt.population import BASE
from randopt.scoring.base_compositions import composition_batches, composition_path, summary as compositions_summary
from randopt.scoring.member_cache import member_path, plan_members
from randopt.runtime.progress import progress
from randopt.tasks import registry
from randopt.runtime.cli import run_stage
from randopt.runtime.engine_args import add_engine_args, engine_from_args, stage_kwargs
from randopt.stages._args import stage_parser


def parse_args(argv=None):
    p = stage_parser("evaluate_members", __doc__, "--decode", "--test", "--topk", "--timings")
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
    return p.parse_args(argv)


def evaluate_base_on_train(engine: Engine | None, make_engine: Callable[[], Engine], spec: DecodeSpec,
                           train: str, cache_dir: str) -> dict:
    """The base model on the train split (cached like a member, under its own suffix). Loads an
    engine only when neither this nor any member needed one."""
    verify_against_manifest(train)
    path = member_path(cache_dir, BASE, 0.0, ".train.parquet")
    if not path.is_file():
        problems = read_jsonl(train, required=("id", "question", "answer"))
        engine = engine or make_engine()
        frame = evaluate_weights(engine, build_prompts(engine, problems, spec), problems, spec, BASE, 0.0,
                                 task=registry.of_split(train))
        log.info("base model: train accuracy %.3f", frame["correct"].mean())
        with atomic_path(path) as tmp:
            frame.to_parquet(tmp, index=False)
    correct = pd.read_parquet(path)["correct"]
    return {"accuracy": float(correct.mean()), "correct": int(correct.sum()), "n": int(len(correct))}


def run(*, make_engine: Callable[[], Engine], decode: dict, test: str, train: str, topk: str, cache_dir: str,
        out: str, timings: str, base_train_out: str, base_compositions_out: str, base_compositions: int = 1) -> None:
    start = time.perf_counter()
    verify_against_manifest(test)
    problems = read_jsonl(test, required=("id", "question", "answer"))
    spec = DecodeSpec.from_config(decode)
    task = registry.of_split(test)
    lists = read_json(topk)
    members, todo = plan_members(lists["topk"] + lists.get("controls", []), cache_dir, ".parquet")
    compositions = range(2, base_compositions + 1)
    again = [c for c in compositions if not composition_path(cache_dir, c).is_file()]
    log.info("%d members (base included), %d cached, %d to evaluate; the base in %d more batch compositions, %d cached",
             len(members), len(members) - len(todo), len(todo), len(compositions), len(compositions) - len(again))
    timing = {"switch_s": 0.0, "generate_s": 0.0, "gen_tokens": 0, "evaluated": len(todo),
              "base_compositions_evaluated": len(again)}
    engine = None
    if todo or again:
        engine = make_engine()
        prompts = build_prompts(engine, problems, spec)

    def count(frame: pd.DataFrame) -> None:
        timing["switch_s"] += float(frame["switch_s"].iloc[0])
        timing["generate_s"] += float(frame["generate_s"].iloc[0])
        timing["gen_tokens"] += int(frame["n_tokens"].sum())

    for seed, sigma in progress(todo, total=len(todo), desc="test split", unit="member"):
        frame = evaluate_weights(engine, prompts, problems, spec, seed, sigma, task=task)
        log.info("member seed %d sigma %g: test accuracy %.3f", seed, sigma, frame["correct"].mean())
        count(frame)
        with atomic_path(member_path(cache_dir, seed, sigma, ".parquet")) as tmp:
            frame.to_parquet(tmp, index=False)
    for c in again:  # after the members: the base's own answers (composition 1) are cached by then
        batches = composition_batches(len(problems), c)
        frame = evaluate_weights(engine, prompts, problems, spec, BASE, 0.0, batches=batches, task=task)
        log.info("base model, batch composition %d (%d calls): test accuracy %.3f", c, len(batches), frame["correct"].mean())
        count(frame)
        with atomic_path(composition_path(cache_dir, c)) as tmp:
            frame.to_parquet(tmp, index=False)
    timing["drift"] = engine_drift(engine)  # before the base's train pass, which restores base anyway
    write_json_atomic(base_train_out, evaluate_base_on_train(engine, make_engine, spec, train, cache_dir))
    table = pd.concat([pd.read_parquet(member_path(cache_dir, *m, ".parquet")) for m in members], ignore_index=True)
    with atomic_path(out) as tmp:
        table.to_parquet(tmp, index=False)
    frames = [pd.read_parquet(composition_path(cache_dir, c)) for c in range(1, base_compositions + 1)]
    write_json_atomic(base_compositions_out, compositions_summary(frames, [p["id"] for p in problems]))
    write_json_atomic(timings, {"stage": "evaluate_members", **timing, "seconds": time.perf_counter() - start})


def main(argv=None) -> int:
    args = parse_args(argv)
    return run_stage("evaluate_members", partial(run, make_engine=partial(engine_from_args, args), **stage_kwargs(args)))


if __name__ == "__main__":
    raise SystemExit(main())
