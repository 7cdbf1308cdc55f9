"""evaluate_members: the base model and every top-k member answer the test split.

Members already evaluated under the same key are read from the member cache, not evaluated again.
"""
from __future__ import annotations

import argparse
import time

import pandas as pd

from randopt.cli import log, run_stage
from randopt.evaluate import BASE, DecodeSpec, build_prompts, evaluate_weights
from randopt.io import atomic_path, read_json, read_jsonl, verify_against_manifest, write_json_atomic
from randopt.member_cache import member_path
from randopt.rank import union_members
from randopt.engines.args import add_engine_args, engine_from_args
from scripts.evaluate_shard import add_decode_args


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m scripts.evaluate_members", description=__doc__)
    add_engine_args(p)
    add_decode_args(p)
    p.add_argument("--test", required=True, help="frozen test split (JSONL)")
    p.add_argument("--train", required=True, help="frozen train split (JSONL): the base model answers it too")
    p.add_argument("--base-train-out", required=True,
                   help="JSON: the base model's train accuracy, the reference for the members' train rewards")
    p.add_argument("--topk", required=True, help="rank's top-k JSON")
    p.add_argument("--cache-dir", required=True, help="content-addressed per-member results")
    p.add_argument("--out", required=True, help="parquet: one row per (member, problem)")
    p.add_argument("--timings", required=True)
    return p.parse_args(argv)


def evaluate_base_on_train(args, engine) -> dict:
    """The base model on the train split (cached like a member, under its own suffix): what the
    members' train rewards are measured against. Loads an engine only when neither is cached."""
    verify_against_manifest(args.train)
    path = member_path(args.cache_dir, BASE, 0.0, ".train.parquet")
    if not path.is_file():
        problems = read_jsonl(args.train, required=("id", "question", "answer"))
        spec = DecodeSpec.from_config(args.decode)
        engine = engine or engine_from_args(args)
        frame = evaluate_weights(engine, build_prompts(engine, problems, spec), problems, spec, BASE, 0.0)
        log.info("base model: train accuracy %.3f", frame["correct"].mean())
        with atomic_path(path) as tmp:
            frame.to_parquet(tmp, index=False)
    correct = pd.read_parquet(path)["correct"]
    return {"accuracy": float(correct.mean()), "correct": int(correct.sum()), "n": int(len(correct))}


def main(argv=None) -> int:
    args = parse_args(argv)

    def body():
        start = time.perf_counter()
        verify_against_manifest(args.test)
        problems = read_jsonl(args.test, required=("id", "question", "answer"))
        members = [(BASE, 0.0)] + union_members(read_json(args.topk)["topk"])
        todo = [m for m in members if not member_path(args.cache_dir, *m, ".parquet").is_file()]
        log.info("%d members (base included), %d cached, %d to evaluate", len(members), len(members) - len(todo), len(todo))
        timing = {"switch_s": 0.0, "generate_s": 0.0, "gen_tokens": 0, "evaluated": len(todo)}
        engine = None
        if todo:
            spec = DecodeSpec.from_config(args.decode)
            engine = engine_from_args(args)
            prompts = build_prompts(engine, problems, spec)
            for seed, sigma in todo:
                frame = evaluate_weights(engine, prompts, problems, spec, seed, sigma)
                log.info("member seed %d sigma %g: test accuracy %.3f", seed, sigma, frame["correct"].mean())
                timing["switch_s"] += float(frame["switch_s"].iloc[0])
                timing["generate_s"] += float(frame["generate_s"].iloc[0])
                timing["gen_tokens"] += int(frame["n_tokens"].sum())
                with atomic_path(member_path(args.cache_dir, seed, sigma, ".parquet")) as tmp:
                    frame.to_parquet(tmp, index=False)
        base_train = evaluate_base_on_train(args, engine)
        write_json_atomic(args.base_train_out, base_train)
        table = pd.concat([pd.read_parquet(member_path(args.cache_dir, *m, ".parquet")) for m in members],
                          ignore_index=True)
        with atomic_path(args.out) as tmp:
            table.to_parquet(tmp, index=False)
        write_json_atomic(args.timings, {"stage": "evaluate_members", **timing, "seconds": time.perf_counter() - start})

    return run_stage("evaluate_members", body)


if __name__ == "__main__":
    raise SystemExit(main())
