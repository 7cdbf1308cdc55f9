"""Members/s with and without engine.speculation: population (issue 31), vLLM's own suffix method (issue 48,
--speculation suffix: this bench only, with the arctic-inference wheel), and what each does to answers.

One ARM per call: one vLLM engine of randopt (randopt.engines.make_engine: resident base copy,
in-place switch, CUDA graphs on) answers --prompts real GSM8K train prompts for --members members in
order: the base, then seeds 1, 2, ... at --sigma, each one weight switch and one generate call
through the library's own scorer (randopt.scoring.scorer.evaluate_weights: the project's chat
prompt, the schema's decode defaults, GSM8K's extraction). Before the first member, one warm-up
generate on unrelated prompts (so no member's answers are drafts before the members start). Per
member it records seconds, generated tokens, and with speculation the draft tokens proposed and
accepted (the proposer's counters, randopt_draft_stats). Arms write arm_<tag>.json under --out.

    python bench/speculation/speculation.py arm --model-dir M --train train128.jsonl --members 24 \\
        --max-tokens 512 --speculation population --draft-tokens 8 --tag pop8_512 --out $OUT
    python bench/speculation/speculation.py compare none_512.json pop8_512.json ... --out results.json

compare pairs arms of the same max_tokens (the first arm without speculation is the reference):
members/s (members after the first, whose answers are no one's drafts, over their seconds), the share of
(member, problem) answers identical to the reference arm's, and the paired difference in reward over
those pairs with its 95 % bootstrap interval (randopt.records.statistics.ensemble_gain). Acceptance by
member index is each member's accepted / proposed draft tokens.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from importlib import metadata
from pathlib import Path

VLLM_ENV = {"VLLM_USE_FLASHINFER_SAMPLER": "0", "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
            "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}



def draft_stats(engine) -> dict:
    """engine.speculation population: draft tokens proposed and accepted since the last call (rank 0's), read
    through the worker extension (randopt/engines/vllm_worker.py); only this bench reads them."""
    return engine.llm.collective_rpc("randopt_draft_stats")[0]

def use_suffix_decoding() -> None:
    """engine.speculation "suffix" for this process: vLLM's suffix method (a suffix tree of the prompt and of
    earlier answers, arctic_inference.suffix_decoding, which needs the arctic-inference wheel built by
    bench/speculation/build_arctic_wheel.sh), --draft-tokens drafted at most a step. Only this bench asks for it."""
    from randopt.engines import vllm_engine
    plain = vllm_engine.speculative_config
    vllm_engine.speculative_config = lambda speculation, draft_tokens: (
        {"method": "suffix", "num_speculative_tokens": int(draft_tokens)} if speculation == "suffix"
        else plain(speculation, draft_tokens))


def arm(args) -> None:
    os.environ.update(VLLM_ENV)
    from randopt.engines.factory import make_engine
    from randopt.io import read_jsonl, write_json_atomic
    from randopt.population import BASE
    from randopt.scoring.scorer import DecodeSpec, build_prompts, evaluate_weights

    if args.speculation == "suffix":  # vLLM's own method (issue 48 item 5), measured here before it is an engine option
        use_suffix_decoding()
    if args.no_async_scheduling:  # attribution only: what vLLM's async scheduling is worth without speculation
        from randopt.engines import vllm_engine
        plain = vllm_engine.llm_options
        vllm_engine.llm_options = lambda *a, **k: plain(*a, **k) | {"async_scheduling": False}
    # the scorer keys answers by the frozen split's canonical id ("train-<row>", randopt/data/gsm8k.py);
    # a raw GSM8K file has none
    problems = [{"id": f"train-{i}", **row} for i, row in enumerate(read_jsonl(args.train)[:args.prompts])]
    decode = json.loads(Path(args.decode_json).read_text()) if args.decode_json else {}
    spec = DecodeSpec.from_config({k: decode[k] for k in ("system", "examples", "stop") if k in decode}
                                  | {"max_tokens": args.max_tokens})
    t0 = time.perf_counter()
    engine = make_engine("vllm", args.model_dir, batch_size=args.batch_size, speculation=args.speculation,
                         draft_tokens=args.draft_tokens)
    start_s = time.perf_counter() - t0
    prompts = build_prompts(engine, problems, spec)
    # warm-up on unrelated prompts: compiles what the first generate compiles, and stores no draft of these
    engine.generate([engine.chat_prompt(f"Write the number {i} in words.") for i in range(args.prompts)],
                    args.max_tokens, list(spec.stop))
    if args.speculation != "none":
        draft_stats(engine)  # reset: the warm-up's drafts are not the members'
    members = []
    for index in range(args.members):
        seed, sigma = (BASE, 0.0) if index == 0 else (index, args.sigma)
        t = time.perf_counter()
        rows = evaluate_weights(engine, prompts, problems, spec, seed, sigma)
        seconds = time.perf_counter() - t
        members.append({"index": index, "seed": seed, "sigma": sigma, "seconds": seconds,
                        "tokens": int(rows["n_tokens"].sum()), "finish_length": int((rows["finish"] == "length").sum()),
                        "drafts": draft_stats(engine) if args.speculation != "none" else {},
                        "answers": rows["completion"].tolist(), "correct": rows["correct"].astype(bool).tolist(),
                        "problem_ids": rows["problem_id"].tolist()})
        print(f"member {index}: {seconds:.2f} s, {members[-1]['tokens']} tokens, {members[-1]['drafts']}", flush=True)
    engine.close()
    import torch
    result = {"tag": args.tag, "speculation": args.speculation, "draft_tokens": args.draft_tokens,
              "max_tokens": args.max_tokens, "prompts": len(problems), "sigma": args.sigma, "batch_size": args.batch_size,
              "engine_start_s": start_s, "members": members,
              "machine": {"gpu": torch.cuda.get_device_name(0), "cpu": platform.processor() or _cpu_model(),
                          "cores": os.cpu_count(), **{p: _version(p) for p in ("vllm", "torch", "triton")}}}
    write_json_atomic(Path(args.out) / f"arm_{args.tag}.json", result)


def _cpu_model() -> str | None:
    info = Path("/proc/cpuinfo")
    return next((line.split(":", 1)[1].strip() for line in info.read_text().splitlines()
                 if line.startswith("model name")), None) if info.exists() else None


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def members_per_s(arm_result: dict) -> float:
    timed = arm_result["members"][1:]  # the first member has no drafts in any arm
    return len(timed) / sum(m["seconds"] for m in timed)


def compare(args) -> None:
    from randopt.io import write_json_atomic
    from randopt.records.statistics import ensemble_gain

    arms = [json.loads(Path(p).read_text()) for p in args.arms]
    rows = []
    for a in arms:
        reference = next(r for r in arms if r["speculation"] == "none" and r["max_tokens"] == a["max_tokens"])
        same, ref_correct, correct = 0, [], []
        for mine, theirs in zip(a["members"], reference["members"]):
            assert mine["problem_ids"] == theirs["problem_ids"] and mine["seed"] == theirs["seed"]
            same += sum(x == y for x, y in zip(mine["answers"], theirs["answers"]))
            ref_correct += theirs["correct"]
            correct += mine["correct"]
        pairs = len(correct)
        acceptance = [(m["drafts"].get("accepted_tokens", 0) / m["drafts"]["draft_tokens"])
                      if m["drafts"].get("draft_tokens") else None for m in a["members"]]
        rows.append({"tag": a["tag"], "speculation": a["speculation"], "draft_tokens": a["draft_tokens"],
                     "max_tokens": a["max_tokens"], "members_per_s": members_per_s(a),
                     "speedup": members_per_s(a) / members_per_s(reference),
                     "tokens_per_s": sum(m["tokens"] for m in a["members"][1:]) / sum(m["seconds"] for m in a["members"][1:]),
                     "engine_start_s": a["engine_start_s"], "pairs": pairs, "identical_share": same / pairs,
                     "reward": sum(correct) / pairs, "reward_difference": ensemble_gain(ref_correct, correct),
                     "acceptance_by_member": acceptance,
                     "tokens_by_member": [m["tokens"] for m in a["members"]],
                     "seconds_by_member": [round(m["seconds"], 3) for m in a["members"]]})
    write_json_atomic(Path(args.out), {"arms": rows, "machine": arms[0]["machine"], "prompts": arms[0]["prompts"],
                                "members": len(arms[0]["members"]), "sigma": arms[0]["sigma"]})
    for r in rows:
        print(f"{r['tag']:>12}: {r['members_per_s']:.3f} members/s ({r['speedup']:.2f}x), identical "
              f"{r['identical_share']:.3f}, reward diff {r['reward_difference']['gain']:+.4f} "
              f"{r['reward_difference']['ci95']}")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    a = sub.add_parser("arm")
    a.add_argument("--model-dir", required=True)
    a.add_argument("--train", required=True)
    a.add_argument("--prompts", type=int, default=128)
    a.add_argument("--members", type=int, default=24)
    a.add_argument("--sigma", type=float, default=1e-3)
    a.add_argument("--max-tokens", type=int, default=512)
    a.add_argument("--batch-size", type=int, default=256)
    a.add_argument("--speculation", default="none", choices=["none", "population", "suffix"],
                   help="suffix: vLLM's own suffix-tree method (needs arctic-inference; this bench only)")
    a.add_argument("--decode-json", default=None,
                   help="a decode block as JSON (system, examples, stop; e.g. a record's \"decode\"); default: the schema's")
    a.add_argument("--draft-tokens", type=int, default=8)
    a.add_argument("--no-async-scheduling", action="store_true",
                   help="vLLM's async scheduling off (speculation by a custom proposer turns it off too)")
    a.add_argument("--tag", required=True)
    a.add_argument("--out", required=True)
    c = sub.add_parser("compare")
    c.add_argument("arms", nargs="+")
    c.add_argument("--out", required=True)
    args = p.parse_args(argv)
    (arm if args.command == "arm" else compare)(args)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    main()
