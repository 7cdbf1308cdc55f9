"""score_bpb: realized-token log-probabilities of the held-out text for the base model and every top-k
member (cached per member), then bits per byte for the base and for each top-k ensemble."""
from __future__ import annotations

import argparse
import time

import numpy as np

from randopt.bpb import ensemble_logprobs, model_bpb
from randopt.cli import log, run_stage
from randopt.evaluate import BASE
from randopt.io import InputError, atomic_path, read_json, read_jsonl, verify_against_manifest, write_json_atomic
from randopt.member_cache import member_label, member_path
from randopt.rank import union_members
from randopt.engines.args import add_engine_args, engine_from_args


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m scripts.score_bpb", description=__doc__)
    add_engine_args(p)
    p.add_argument("--heldout", required=True, help="held-out text slice (JSONL with 'text')")
    p.add_argument("--topk", required=True, help="rank's top-k JSON")
    p.add_argument("--cache-dir", required=True, help="content-addressed per-member log-probabilities")
    p.add_argument("--out", required=True, help="JSON")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)

    def body():
        start = time.perf_counter()
        verify_against_manifest(args.heldout)
        texts = [row["text"] for row in read_jsonl(args.heldout, required=("text",))]
        if not texts:
            raise InputError(f"{args.heldout}: the held-out slice is empty")
        n_bytes = sum(len(t.encode("utf-8")) for t in texts)
        topk = read_json(args.topk)["topk"]
        members = [(BASE, 0.0)] + union_members(topk)
        todo = [m for m in members if not member_path(args.cache_dir, *m, ".npy").is_file()]
        log.info("%d members (base included), %d cached; %d documents, %d bytes", len(members),
                 len(members) - len(todo), len(texts), n_bytes)
        if todo:
            engine = engine_from_args(args)
            for seed, sigma in todo:
                if seed == BASE:
                    engine.restore_base()
                else:
                    engine.set_weights(seed, sigma)
                scored = engine.token_logprobs(texts)
                if sum(s.n_bytes for s in scored) != n_bytes:
                    raise RuntimeError("engine byte count disagrees with the text's UTF-8 length")
                with atomic_path(member_path(args.cache_dir, seed, sigma, ".npy")) as tmp:
                    with open(tmp, "wb") as fh:
                        np.save(fh, np.concatenate([s.logprobs for s in scored]).astype(np.float32))
        logprobs = {m: np.load(member_path(args.cache_dir, *m, ".npy")) for m in members}
        result = {"stage": "score_bpb", "n_docs": len(texts), "n_bytes": n_bytes,
                  "n_tokens": int(logprobs[(BASE, 0.0)].size), "evaluated": len(todo),
                  "base": model_bpb(logprobs[(BASE, 0.0)], n_bytes),
                  "members": {member_label(*m): model_bpb(logprobs[m], n_bytes) for m in members[1:]},
                  "ensemble": {}}
        for lst in topk:
            chosen = [logprobs[(m["seed"], m["sigma"])] for m in lst["members"]]
            result["ensemble"][repr(lst["fraction"])] = model_bpb(ensemble_logprobs(chosen), n_bytes)
        result["seconds"] = time.perf_counter() - start
        write_json_atomic(args.out, result)

    return run_stage("score_bpb", body)


if __name__ == "__main__":
    raise SystemExit(main())
