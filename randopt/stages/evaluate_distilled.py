"""evaluate_distilled: a fine-tuned model (distilled or control) answers the test split and scores the
held-out text exactly as the base model does in evaluate_members and score_bpb: the same engine (the
merged model dir loaded as a base), prompts, decoding, extraction (randopt/scoring/scorer.py) and bpb
(randopt/ensemble/bpb.py). Its folder's key holds the model's, so the output is the cache.
"""
from __future__ import annotations

import time
from functools import partial
from collections.abc import Callable

from randopt.engines.base import Engine
from randopt.ensemble.bpb import heldout_logprobs, model_bpb, read_heldout
from randopt.io import atomic_path, read_json, read_jsonl, verify_against_manifest, write_json_atomic
from randopt.population import BASE
from randopt.runtime.log import log
from randopt.scoring.scorer import DecodeSpec, build_prompts, evaluate_weights
from randopt.tasks import registry
from randopt.runtime.cli import run_stage
from randopt.runtime.engine_args import add_engine_args, engine_from_args, stage_kwargs
from randopt.stages._args import stage_parser


def parse_args(argv=None):
    p = stage_parser("evaluate_distilled", __doc__, "--decode-file", "--test", "--heldout")
    add_engine_args(p)
    p.add_argument("--model-manifest", required=True, help="distill_train's manifest of the model in --model-dir")
    p.add_argument("--arm", required=True, choices=["distilled", "control"])
    p.add_argument("--out-answers", required=True, help="parquet: one row per test problem")
    p.add_argument("--out", required=True, help="JSON: test accuracy, per-problem correctness, bpb")
    return p.parse_args(argv)


def run(*, make_engine: Callable[[], Engine], model_manifest: str, arm: str, decode: dict, test: str, heldout: str,
        out_answers: str, out: str) -> None:
    start = time.perf_counter()
    verify_against_manifest(test)
    problems = read_jsonl(test, required=("id", "question", "answer"))
    spec = DecodeSpec.from_config(decode)
    engine = make_engine()
    frame = evaluate_weights(engine, build_prompts(engine, problems, spec), problems, spec, BASE, 0.0,
                             task=registry.of_split(test))
    log.info("%s model: test accuracy %.3f", arm, frame["correct"].mean())
    texts, n_bytes = read_heldout(heldout)  # score_bpb's reading and scoring, for one model
    bpb = model_bpb(heldout_logprobs(engine, texts, n_bytes), n_bytes)
    with atomic_path(out_answers) as tmp:
        frame.to_parquet(tmp, index=False)
    model = read_json(model_manifest)
    write_json_atomic(out, {
        "stage": "evaluate_distilled", "arm": arm, "round": model["round"], "model_sha256": model["sha256"],
        "n_test": len(problems), "test_accuracy": float(frame["correct"].mean()),
        "problem_ids": frame["problem_id"].tolist(), "correct": [bool(c) for c in frame["correct"]],
        "bpb": bpb, "gen_tokens": int(frame["n_tokens"].sum()), "seconds": time.perf_counter() - start})


def main(argv=None) -> int:
    args = parse_args(argv)
    return run_stage("evaluate_distilled", partial(run, make_engine=partial(engine_from_args, args), **stage_kwargs(args)))


if __name__ == "__main__":
    raise SystemExit(main())
