"""Members/s when M members decode together in one forward pass (issue 28: co-batching on a small model).

The torch engine (randopt.engines.make_engine("torch"): resident base copy, the library's switch) answers
--prompts real GSM8K train prompts for M members at once through TorchEngine.generate_members
(randopt/engines/member_batch.py: every perturbed tensor stacked over a member axis, one step a token for
all M x prompts rows), for each M of --members, in one process, after one warm-up call. Seeds 1..M at
--sigma, greedy, the project's chat prompt, GSM8K's extraction; --max-tokens 512 and no stop strings by
default (FlashOpt's protocol, as bench/peers measured vLLM under). First --plain-members members one at a
time (a switch, then generate on the engine's own model: full evaluation's path with member_batch 1), the
baseline. Per M it records the call's seconds (the stacking switch included), members/s and its ratio to
the baseline, generated tokens/s, peak GPU memory, the share of seed 1's answers identical to its answers
one at a time (near-ties can resolve otherwise in a bmm), and the correct count. An M that runs out of memory is recorded as such and ends the sweep.

--decode static (engine.torch_decode): the engine decodes with a StaticCache that transformers compiles on
CUDA (CUDA graphs). Then the first call of each shape compiles, so the baseline and every M are called twice on
the same prompts: the first call's seconds are recorded as first_call_s, the second's as seconds (the rates
come from it), and compile_s = first_call_s - seconds (compile and graph capture; the first call decodes too).
--vllm-baseline PATH: bench/peers/executor_modes.py's JSON of its inproc mode on the same prompts (the
project's chat prompt: --prompt project), so that each M's members/s is set against one vLLM engine's.

    python bench/engines_per_gpu/member_batch.py --model-dir M --train .gpu-snap/gsm8k/train128.jsonl \\
        --members 1 4 8 16 32 --decode static --out $OUT/engines_per_gpu_member_batch_h200_smollm2_static.json

On a CPU it runs too (tests/test_bench_member_batch.py runs it on a tiny model), but there a step is
bound by arithmetic, not by the host, and batching members saves little.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def sweep(args) -> dict:
    import torch

    from randopt.engines import compute_dtype as cdt
    from randopt.engines.factory import make_engine
    from randopt.engines.switch import switch_weights
    from randopt.io import read_jsonl, write_json_atomic
    from randopt.records import assemble as rec
    from randopt.scoring.scorer import DecodeSpec, build_prompts, score_completions

    problems = [{"id": f"train-{i}", **row} for i, row in enumerate(read_jsonl(args.train)[:args.prompts])]
    spec = DecodeSpec.from_config({"max_tokens": args.max_tokens} | ({} if args.stop else {"stop": []}))
    baseline = vllm_baseline(args.vllm_baseline) if args.vllm_baseline else None
    vllm = baseline if baseline and "error" not in baseline else None   # the ratios' base
    if vllm and (vllm["protocol"]["prompts"], vllm["protocol"]["max_tokens"]) != (len(problems), args.max_tokens):
        raise SystemExit(f"--vllm-baseline {args.vllm_baseline}: its protocol {vllm['protocol']} is not this run's "
                         f"({len(problems)} prompts, max_tokens {args.max_tokens}); run both on the same prompts")
    t0 = time.perf_counter()
    engine = make_engine("torch", args.model_dir, device=args.device, batch_size=len(problems),
                         compute_dtype=args.compute_dtype, torch_decode=args.decode)
    start_s = time.perf_counter() - t0
    prompts = build_prompts(engine, problems, spec)
    cuda = engine.device.type == "cuda"
    static = args.decode == "static"
    if not static:   # static: the first call of each shape is its warm-up (another shape would compile once more)
        engine.generate_members([(1, args.sigma)], prompts[:8], 8, list(spec.stop))   # warm-up: kernels, allocator

    def timed(call):
        """(seconds, result) of call(), the GPU's work included."""
        if cuda:
            torch.cuda.synchronize()
        t = time.perf_counter()
        result = call()
        if cuda:
            torch.cuda.synchronize()
        return time.perf_counter() - t, result

    report = {"what": "bench/engines_per_gpu/member_batch.py", "model_dir": args.model_dir, "train": args.train,
              "prompts": len(problems), "max_tokens": args.max_tokens, "stop": list(spec.stop), "sigma": args.sigma,
              "decode": args.decode,
              "device": str(engine.device), "compute_dtype": str(engine.compute_dtype), "engine_start_s": start_s,
              "machine": {**rec.hardware(), "cpu": cdt.read_cpu().as_dict(), "cpu_count": os.cpu_count(),
                          "torch_threads": torch.get_num_threads()},
              "commit": rec.git_commit(REPO), "created_utc": rec.now_utc(),
              "versions": {p: _version(p) for p in ("torch", "transformers")}, "runs": []}
    # One member at a time, the path full evaluation takes with member_batch 1 (a switch, then generate on
    # the engine's own model): the baseline every M is compared with, and seed 1's reference answers.
    # The first member's call is a warm-up in both decodes (static: it compiles; eager on a GPU it paid CUDA's
    # first full-batch kernels, 40 s against 11 s on the H200): recorded apart, the rates come from the others.
    plain_s, plain_tokens, reference, first_call = [], 0, None, None
    for seed in range(1, args.plain_members + 2):
        seconds, done = timed(lambda: (switch_weights(engine, seed, args.sigma),
                                       engine.generate(prompts, args.max_tokens, list(spec.stop)))[1])
        reference = reference or [c.text for c in done]
        if first_call is None:
            first_call = seconds
            continue
        plain_s.append(seconds)
        plain_tokens += sum(c.n_tokens for c in done)
    one = {"members": len(plain_s), "seconds": plain_s, "members_per_s": len(plain_s) / sum(plain_s),
           "gen_tokens_per_s": plain_tokens / sum(plain_s), "first_call_s": first_call,
           "compile_s": first_call - plain_s[0] if static and cuda else None}
    report["one_at_a_time"] = one
    report["vllm"] = baseline
    print(f"one at a time: {1 / one['members_per_s']:.2f} s a member, {one['members_per_s']:.3f} members/s", flush=True)
    for m in args.members:
        members = [(seed, args.sigma) for seed in range(1, m + 1)]
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        calls = []   # static: (first call: stack, compile, decode), (second: decode); eager: one call
        try:
            for _ in range(1 + static):
                calls.append(timed(lambda: engine.generate_members(members, prompts, args.max_tokens, list(spec.stop))))
        except torch.OutOfMemoryError as err:
            report["runs"].append({"members": m, "error": f"out of memory: {str(err)[:300]}",
                                   "first_call_s": calls[0][0] if calls else None})
            break
        seconds, answers = calls[-1]
        tokens = sum(c.n_tokens for member in answers for c in member)
        first = [c.text for c in answers[0]]
        scored = [score_completions(problems, member) for member in answers]
        run = {"members": m, "seconds": seconds, "members_per_s": m / seconds, "gen_tokens": tokens,
               "gen_tokens_per_s": tokens / seconds,
               "finish_length": sum(c.finish == "length" for member in answers for c in member),
               "seed1_identical_to_one_at_a_time": sum(a == b for a, b in zip(first, reference)) / len(first),
               "members_per_s_over_one_at_a_time": m / seconds / one["members_per_s"],
               "correct": sum(row["correct"] for rows in scored for row in rows),
               "peak_gpu_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None}
        if static:   # the second call reuses the first's stack (same members): decode only
            run |= {"first_call_s": calls[0][0], "compile_s": calls[0][0] - seconds if cuda else None,   # CPU: none
                    "first_call_identical": [[c.text for c in a] for a in calls[0][1]] == [[c.text for c in a] for a in answers]}
        if vllm:
            run["members_per_s_over_vllm"] = run["members_per_s"] / vllm["members_per_s"]
        report["runs"].append(run)
        print(f"M={m}: {seconds:.2f} s, {run['members_per_s']:.3f} members/s, {run['gen_tokens_per_s']:.0f} tok/s, "
              f"{run['members_per_s_over_one_at_a_time']:.2f}x one at a time, seed 1 identical "
              f"{run['seed1_identical_to_one_at_a_time']:.3f}"
              + (f", compile {run['compile_s']:.1f} s" if static and cuda else "")
              + (f", {run['members_per_s_over_vllm']:.2f}x one vLLM engine" if vllm else ""), flush=True)
        write_json_atomic(Path(args.out), report)   # each M as it ends: a cut call keeps the ones before
    base = next((r for r in report["runs"] if r["members"] == 1 and "seconds" in r), None)
    for r in report["runs"]:
        if base and "seconds" in r:
            r["members_per_s_over_m1"] = r["members_per_s"] / base["members_per_s"]
    write_json_atomic(Path(args.out), report)
    return report


def vllm_baseline(path: str) -> dict:
    """One vLLM engine's members/s from bench/peers/executor_modes.py's JSON (its inproc mode): a member is a
    switch plus a generate call over the same prompts."""
    import json
    report = json.loads(Path(path).read_text())
    mode = report["modes"].get("inproc") or {"error": "no inproc mode in the file"}
    if "error" in mode:
        return {"file": path, "error": mode["error"]}
    return {"file": path, "protocol": report["protocol"], "engine_start_s": mode["engine_start_s"],
            "s_per_member": mode["s_per_member"], "members_per_s": 1 / mode["s_per_member"],
            "gen_tokens_per_s": mode["gen_tokens_per_s"], "members": len(mode["members"])}


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--train", required=True, help="GSM8K-format JSONL (question, answer)")
    parser.add_argument("--prompts", type=int, default=128)
    parser.add_argument("--max-tokens", type=int, default=512)
    parser.add_argument("--stop", action=argparse.BooleanOptionalAction, default=False,
                        help="keep the schema's decode.stop (default: no stop strings, FlashOpt's protocol)")
    parser.add_argument("--members", type=int, nargs="+", default=[1, 4, 8, 16, 32])
    parser.add_argument("--sigma", type=float, default=1e-3)
    parser.add_argument("--plain-members", type=int, default=2,
                        help="members timed one at a time (switch, then generate: member_batch 1's path), the baseline")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--compute-dtype", default="auto")
    parser.add_argument("--decode", choices=["eager", "static"], default="eager",
                        help="the torch engine's decode (engine.torch_decode); static: each shape called twice, "
                             "compile timed apart")
    parser.add_argument("--vllm-baseline", help="bench/peers/executor_modes.py's JSON (inproc) on the same prompts")
    parser.add_argument("--out", required=True)
    sweep(parser.parse_args())


if __name__ == "__main__":
    main()
