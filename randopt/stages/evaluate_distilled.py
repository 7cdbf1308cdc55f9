"""evaluate_distilled: a fine-tuned model (distilled or control) answers the test split and scores the
held-out text exactly as the base model does in evaluate_members and score_bpb: the same engine (the
merged model dir loaded as a base), prompts, decoding, extraction (randopt/scoring/scorer.py) and bpb
(randopt/ensemble/bpb.py). Its folder's key holds the model's, so the output is the cache.
"""
from __future__ import annotations

import time
from collections.abc import Callable

from randopt.engines.base import Engine
from randopt.ensemble.bpb import heldout_logprobs, model_bpb, read_heldout
from randopt.io import atomic_path, read_json, read_jsonl, verify_against_manifest, write_json_atomic
from randopt.population import BASE
from randopt.runtime.log import log
from randopt.scoring.scorer import DecodeSpec, build_prompts, evaluate_weights
from randopt.tasks import registry


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
