"""evaluate_members: the base model and every top-k member answer the test split; the base model
also answers the train split (the reference for the members' train rewards).

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
        out: str, timings: str, base_train_out: str) -> None:
    start = time.perf_counter()
    verify_against_manifest(test)
    problems = read_jsonl(test, required=("id", "question", "answer"))
    spec = DecodeSpec.from_config(decode)
    task = registry.of_split(test)
    members, todo = plan_members(read_json(topk)["topk"], cache_dir, ".parquet")
    log.info("%d members (base included), %d cached, %d to evaluate", len(members), len(members) - len(todo), len(todo))
    timing = {"switch_s": 0.0, "generate_s": 0.0, "gen_tokens": 0, "evaluated": len(todo)}
    engine = None
    if todo:
        engine = make_engine()
        prompts = build_prompts(engine, problems, spec)
        for seed, sigma in progress(todo, total=len(todo), desc="test split", unit="member"):
            frame = evaluate_weights(engine, prompts, problems, spec, seed, sigma, task=task)
            log.info("member seed %d sigma %g: test accuracy %.3f", seed, sigma, frame["correct"].mean())
            timing["switch_s"] += float(frame["switch_s"].iloc[0])
            timing["generate_s"] += float(frame["generate_s"].iloc[0])
            timing["gen_tokens"] += int(frame["n_tokens"].sum())
            with atomic_path(member_path(cache_dir, seed, sigma, ".parquet")) as tmp:
                frame.to_parquet(tmp, index=False)
    timing["drift"] = engine_drift(engine)  # before the base's train pass, which restores base anyway
    write_json_atomic(base_train_out, evaluate_base_on_train(engine, make_engine, spec, train, cache_dir))
    table = pd.concat([pd.read_parquet(member_path(cache_dir, *m, ".parquet")) for m in members], ignore_index=True)
    with atomic_path(out) as tmp:
        table.to_parquet(tmp, index=False)
    write_json_atomic(timings, {"stage": "evaluate_members", **timing, "seconds": time.perf_counter() - start})


def main(argv=None) -> int:
    args = parse_args(argv)
    return run_stage("evaluate_members", partial(run, make_engine=partial(engine_from_args, args), **stage_kwargs(args)))


if __name__ == "__main__":
    raise SystemExit(main())
