"""Does a resident engine (randopt/runtime/resident/) decode slower than one in the job's own process?

    python bench/resident/resident_ab.py --model-dir DIR --train train.jsonl [--problems 16] [--reps 4]

Both engines are loaded in one run with the same options; the same members answer the same prompts
through each, interleaved (ABBA ...) so that drift of the machine falls on both. Prints, and writes
with --out, the seconds of every generate call and the milliseconds per generated token each way.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from randopt.runtime import resident  # noqa: E402
from randopt.engines.factory import make_engine  # noqa: E402
from randopt.scoring.scorer import DecodeSpec, build_prompts  # noqa: E402
from randopt.io import read_jsonl, write_json_atomic  # noqa: E402


def measure(model_dir: str, problems: list[dict], options: dict, spec: DecodeSpec, reps: int,
            members: list[tuple[int, float]]) -> dict:
    local = make_engine("torch", model_dir, **options)
    with tempfile.TemporaryDirectory(prefix="resident-ab-") as folder:
        remote = resident.connect("torch", model_dir, options, Path(folder) / "engines", keep_loaded_s=600)
        try:
            prompts = build_prompts(local, problems, spec)
            if prompts != build_prompts(remote, problems, spec):
                raise SystemExit("error: the two engines build different prompts")
            calls = {"local": [], "resident": []}
            for rep in range(reps):
                order = [("local", local), ("resident", remote)]
                for name, engine in order if rep % 2 == 0 else order[::-1]:
                    for seed, sigma in members:
                        engine.set_weights(seed, sigma)
                        start = time.perf_counter()
                        out = engine.generate(prompts, spec.max_tokens, list(spec.stop))
                        calls[name].append({"seconds": time.perf_counter() - start,
                                            "tokens": sum(c.n_tokens for c in out)})
        finally:
            remote.close()
            resident.stop_all(Path(folder) / "engines")
    return {name: {"calls": c, "ms_per_token": 1000 * sum(x["seconds"] for x in c) / sum(x["tokens"] for x in c)}
            for name, c in calls.items()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model-dir", required=True, help="a prepared model dir (data/models/<key>/model)")
    p.add_argument("--train", required=True, help="a frozen train split (JSONL)")
    p.add_argument("--problems", type=int, default=16)
    p.add_argument("--reps", type=int, default=4, help="rounds of both engines, alternating which goes first")
    p.add_argument("--sigma", type=float, default=0.008)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--compute-dtype", default="bfloat16", choices=["bfloat16", "float32"])
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    if not Path(args.model_dir).is_dir():
        print(f"error: --model-dir {args.model_dir} is not a folder", file=sys.stderr)
        return 2
    problems = read_jsonl(args.train, required=("id", "question", "answer"))[:args.problems]
    options = {"device": "cpu", "batch_size": len(problems), "compute_dtype": args.compute_dtype,
               "threads": args.threads}
    spec = DecodeSpec.from_config({"max_tokens": args.max_tokens})
    result = measure(args.model_dir, problems, options, spec, args.reps, [(1, args.sigma), (2, args.sigma)])
    for name, r in result.items():
        print(f"{name}: {r['ms_per_token']:.2f} ms/token over {len(r['calls'])} calls")
    if args.out:
        write_json_atomic(args.out, {"options": options, "max_tokens": args.max_tokens, "result": result})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
