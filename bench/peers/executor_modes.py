"""Where does randopt's engine lose 1.17x per member to FlashOpt's? vLLM's process layout, measured (issue 28).

bench/results/peers/peers_h200_smollm2.json: on the same H200, the same model dir and the same 66 members x 128
GSM8K prompts x 512 tokens, randopt's engine generated 22.3k tokens/s in its generate calls and FlashOpt's
26.1k. Both are vLLM 0.25 with CUDA graphs, no prefix caching, max_num_seqs 512 and max_model_len 2048. One
difference is where vLLM's pieces run. randopt (VLLM_ENABLE_V1_MULTIPROCESSING=0, one GPU) keeps the front
end, the engine core and the GPU worker in one process; FlashOpt's Ray executor keeps the core in its
actor but the worker in an actor of its own. For a model whose decode step is mostly host work, that may
be the difference. This script runs randopt's own engine (randopt.engines.vllm_engine.VllmEngine: its
tokenisation, its in-place weight switch, its generate) under each layout in a fresh process and reports
generated tokens/s and seconds per member:

    inproc          randopt today: front end, core and worker in one process
    inproc_async    the same with vLLM's async scheduling asked for (the CPU schedules step t+1 while the
                    GPU runs step t)
    core_proc       the engine core (and its worker) in a process of its own (vLLM's default layout)
    core_proc_async the same with async scheduling
    worker_proc     the core in this process, the worker in its own (distributed_executor_backend "mp"):
                    FlashOpt's layout without Ray

    PYTHONPATH=/tmp/site python3 bench/peers/executor_modes.py --model-dir DIR --train .peers/data/randopt/train.jsonl \
        --modes inproc core_proc ... --members 6 --out $OUT/executor_modes_smollm2.json

Each mode: engine start, one warm-up member, then --members members (seeds 0.., sigma 1e-3) with
FlashOpt's protocol (bench/peers/protocol.py: the first 128 problems, max_tokens 512, no stop strings).
A mode that fails (e.g. vLLM refuses async scheduling with that executor) is recorded with its error.
--prompt project builds the prompts as the project's scorer does (the schema's decode system line and worked
examples, randopt.scoring.scorer.build_prompts) instead of the bare question in the chat template: how
bench/engines_per_gpu/member_batch_h200.sh's VLLM_BASELINE=1 measures one vLLM engine on member_batch.py's prompts.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

MODES = {
    "inproc": ({"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}, {}),
    "inproc_async": ({"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}, {"async_scheduling": True}),
    "core_proc": ({"VLLM_ENABLE_V1_MULTIPROCESSING": "1"}, {}),
    "core_proc_async": ({"VLLM_ENABLE_V1_MULTIPROCESSING": "1"}, {"async_scheduling": True}),
    "worker_proc": ({"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}, {"distributed_executor_backend": "mp"}),
}


def one_mode(model_dir: str, train: str, n_prompts: int, max_tokens: int, members: int, extra: dict,
             prompt: str = "plain") -> dict:
    """In this (fresh) process: randopt's vLLM engine with `extra` added to vllm.LLM's arguments."""
    from randopt.engines import vllm_engine
    from randopt.io import read_jsonl

    options = vllm_engine.llm_options
    vllm_engine.llm_options = lambda *a, **k: options(*a, **k) | extra   # the one change under test
    t0 = time.perf_counter()
    engine = vllm_engine.VllmEngine(model_dir, batch_size=512)
    start_s = time.perf_counter() - t0
    config = engine.llm.llm_engine.vllm_config
    problems = read_jsonl(train)[:n_prompts]
    if prompt == "project":
        from randopt.scoring.scorer import DecodeSpec, build_prompts
        prompts = build_prompts(engine, problems, DecodeSpec.from_config({"max_tokens": max_tokens, "stop": []}))
    else:
        prompts = [engine.chat_prompt(p["question"]) for p in problems]
    prompt_tokens = sum(len(engine.tokenizer(p, add_special_tokens=False)["input_ids"]) for p in prompts)
    engine.set_weights(10_000, 1e-3)
    engine.generate(prompts, max_tokens, [])            # warm-up member
    rows = []
    for seed in range(members):
        a = time.perf_counter()
        engine.set_weights(seed, 1e-3)
        b = time.perf_counter()
        out = engine.generate(prompts, max_tokens, [])
        c = time.perf_counter()
        rows.append({"seed": seed, "switch_s": b - a, "generate_s": c - b, "tokens": sum(o.n_tokens for o in out)})
    cpu = os.times()
    engine.close()
    tokens, gen_s = sum(r["tokens"] for r in rows), sum(r["generate_s"] for r in rows)
    return {"engine_start_s": start_s, "members": rows, "gen_tokens_per_s": tokens / gen_s,
            "s_per_member": sum(r["switch_s"] + r["generate_s"] for r in rows) / len(rows),
            "async_scheduling": getattr(config.scheduler_config, "async_scheduling", None),
            "executor": str(getattr(config.parallel_config, "distributed_executor_backend", None)),
            "this_process_cpu_s": cpu.user + cpu.system, "extra_llm_args": extra, "prompt": prompt,
            "prompt_tokens": prompt_tokens}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--train", required=True, help="JSONL with 'question' (bench/peers/prep_host.py's slice)")
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    parser.add_argument("--members", type=int, default=6)
    parser.add_argument("--prompts", type=int, default=128)
    parser.add_argument("--max-tokens", type=int, default=512)
    parser.add_argument("--timeout", type=float, default=150, help="seconds a mode may take")
    parser.add_argument("--prompt", choices=["plain", "project"], default="plain",
                        help="plain: the question alone in the chat template (FlashOpt's protocol); project: the "
                             "scorer's prompt (decode's system line and worked examples)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:   # one mode, in this fresh process; its JSON on the last line of stdout
        result = one_mode(args.model_dir, args.train, args.prompts, args.max_tokens, args.members, MODES[args.worker][1],
                          args.prompt)
        print("RESULT " + json.dumps(result))
        return 0
    results = {}
    for mode in args.modes:
        env = os.environ | MODES[mode][0]
        cmd = [sys.executable, __file__, "--worker", mode] + [a for a in sys.argv[1:] if a != "--modes"
                                                               and a not in MODES]
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
            lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
            results[mode] = json.loads(lines[-1][7:]) if lines else {"error": f"exit {proc.returncode}",
                                                                       "log_tail": proc.stderr[-3000:]}
        except subprocess.TimeoutExpired as cut:   # its log says how far it got (engine start, members)
            tail = cut.stderr.decode(errors="replace") if isinstance(cut.stderr, bytes) else (cut.stderr or "")
            results[mode] = {"error": f"timed out after {args.timeout:.0f} s", "log_tail": tail[-3000:]}
        results[mode]["wall_s"] = time.perf_counter() - t0
        r = results[mode]
        print(f"{mode:16s} " + (f"{r['gen_tokens_per_s']:8.0f} tok/s  {r['s_per_member']:.3f} s/member  start "
                                f"{r['engine_start_s']:.1f} s  async {r['async_scheduling']}" if "error" not in r
                                else r["error"] + "\n" + r.get("log_tail", "")[-1500:]), flush=True)
        Path(args.out).write_text(json.dumps(write_up(args, results), indent=2))
    return 0


def write_up(args, results: dict) -> dict:
    import platform
    import torch
    return {"what": "randopt's vLLM engine under vLLM's process layouts (bench/peers/executor_modes.py)",
            "model_dir": args.model_dir, "protocol": {"prompts": args.prompts, "max_tokens": args.max_tokens,
                                                      "stop": [], "members": args.members, "sigma": 1e-3,
                                                      "prompt": args.prompt, "train": args.train},
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "cpu": platform.processor(), "cpu_count": os.cpu_count(), "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "modes": results}


if __name__ == "__main__":
    raise SystemExit(main())
