"""score_bpb: realized-token log-probabilities of the held-out text for the base model and every top-k
member (cached per member), then bits per byte for the base and for each top-k ensemble."""
from __future__ import annotations

import time
from functools import partial
from collections.abc import Callable

import numpy as np

from randopt.ensemble.bpb import ensemble_logprobs, heldout_logprobs, model_bpb, read_heldout
from randopt.runtime.log import log
from randopt.engines.base import Engine
from randopt.io import atomic_path, read_json, write_json_atomic
from randopt.engines.switch import switch_weights
from randopt.population import BASE
from randopt.scoring.member_cache import member_label, member_path, plan_members
from randopt.runtime.progress import progress
from randopt.runtime.cli import run_stage
from randopt.runtime.engine_args import add_engine_args, engine_from_args, stage_kwargs
from randopt.stages._args import stage_parser


def parse_args(argv=None):
    p = stage_parser("score_bpb", __doc__, "--heldout", "--topk")
    add_engine_args(p)
    p.add_argument("--cache-dir", required=True, help="content-addressed per-member log-probabilities")
    p.add_argument("--out", required=True, help="JSON")
    p.add_argument("--max-context", type=int, default=None,
                   help="scoring window in tokens (heldout.max_context; default: the engine's own max_context)")
    return p.parse_args(argv)


def run(*, make_engine: Callable[[], Engine], heldout: str, topk: str, cache_dir: str, out: str,
        max_context: int | None = None) -> None:
    """max_context: the scoring window (heldout.max_context), given per call so that the engine can be
    the search's resident one."""
    start = time.perf_counter()
    texts, n_bytes = read_heldout(heldout)
    lists = read_json(topk)["topk"]
    members, todo = plan_members(lists, cache_dir, ".npy")
    log.info("%d members (base included), %d cached; %d documents, %d bytes", len(members),
             len(members) - len(todo), len(texts), n_bytes)
    if todo:
        engine = make_engine()
        for seed, sigma in progress(todo, total=len(todo), desc="held-out text", unit="member"):
            switch_weights(engine, seed, sigma)
            logprobs = heldout_logprobs(engine, texts, n_bytes, max_context)
            with atomic_path(member_path(cache_dir, seed, sigma, ".npy")) as tmp:
                with open(tmp, "wb") as fh:
                    np.save(fh, logprobs)
    logprobs = {m: np.load(member_path(cache_dir, *m, ".npy")) for m in members}
    result = {"stage": "score_bpb", "n_docs": len(texts), "n_bytes": n_bytes,
              "n_tokens": int(logprobs[(BASE, 0.0)].size), "evaluated": len(todo),
              "base": model_bpb(logprobs[(BASE, 0.0)], n_bytes),
              "members": {member_label(*m): model_bpb(logprobs[m], n_bytes) for m in members[1:]},
              "ensemble": {}}
    for lst in lists:
        chosen = [logprobs[(m["seed"], m["sigma"])] for m in lst["members"]]
        result["ensemble"][repr(lst["fraction"])] = model_bpb(ensemble_logprobs(chosen), n_bytes)
    result["seconds"] = time.perf_counter() - start
    write_json_atomic(out, result)


def main(argv=None) -> int:
    args = parse_args(argv)
    return run_stage("score_bpb", partial(run, make_engine=partial(engine_from_args, args), **stage_kwargs(args)))


if __name__ == "__main__":
    raise SystemExit(main())
