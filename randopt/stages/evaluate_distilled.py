"""evaluate_distilled: a fine-tuned model (distilled or control) answers the test split and scores the
held-out text exactly as the base model does in evaluate_members and score_bpb: the same engine (the
merged model dir loaded as a base), prompts, decoding, extraction (randopt/scoring/scorer.py) and bpb
(randopt/ensemble/bpb.py). Its folder's key holds the model's, so the output is the cache.
"""
from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from randopt.engines.base import Engine
from randopt.ensemble.bpb import model_bpb
from randopt.io import InputError, atomic_path, read_json, read_jsonl, verify_against_manifest, write_json_atomic
from randopt.population import BASE
from randopt.runtime.log import log
from randopt.scoring.scorer import DecodeSpec, build_prompts, evaluate_weights
from randopt.tasks import registry


def heldout_bpb(engine: Engine, heldout: str) -> dict:
    """bpb of the engine's current weights on the held-out slice: score_bpb's reading and sum, for one model.
    Restated, not shared: an edit to randopt/stages/score_bpb.py changes every run's bpb key."""
    verify_against_manifest(heldout)
    texts = [row["text"] for row in read_jsonl(heldout, required=("text",))]
    if not texts:
        raise InputError(f"{heldout}: the held-out slice is empty")
    scored = engine.token_logprobs(texts)
    n_bytes = sum(len(t.encode("utf-8")) for t in texts)
    if sum(s.n_bytes for s in scored) != n_bytes:
        raise RuntimeError("engine byte count disagrees with the text's UTF-8 length")
    return {"bpb": model_bpb(np.concatenate([s.logprobs for s in scored]), n_bytes), "n_bytes": n_bytes}


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
    scored = heldout_bpb(engine, heldout)
    with atomic_path(out_answers) as tmp:
        frame.to_parquet(tmp, index=False)
    model = read_json(model_manifest)
    write_json_atomic(out, {
        "stage": "evaluate_distilled", "arm": arm, "round": model["round"], "model_sha256": model["sha256"],
        "n_test": len(problems), "test_accuracy": float(frame["correct"].mean()),
        "problem_ids": frame["problem_id"].tolist(), "correct": [bool(c) for c in frame["correct"]],
        "bpb": scored["bpb"], "gen_tokens": int(frame["n_tokens"].sum()), "seconds": time.perf_counter() - start})
