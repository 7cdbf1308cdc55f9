"""Seeds/s of the vLLM engine on an H200 at the anchor's protocol (issue 4).

A random-weight model shaped like Qwen2.5-7B-Instruct (config written out here; no download),
128 prompts x 512 generated tokens each (ignore_eos), greedy; per seed: switch (reconstruct on the
GPU) then generate. Prints one table and writes vllm_bench.json to --out or $OUT:
generated tokens/s, switch ms, seeds/s, and the seed-loop overhead = (time per seed - generate time)
/ time per seed, all from one run.
    PYTHONPATH=. python bench/vllm/vllm_bench.py
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

QWEN25_7B = dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
                 num_key_value_heads=4, vocab_size=152064, max_position_embeddings=4096, rope_theta=1e6,
                 rms_norm_eps=1e-6, tie_word_embeddings=False, hidden_act="silu")


def build_random_7b(path: Path, tokenizer_dir: str | None) -> Path:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from randopt.model.prepare import save_tokenizer

    if (path / "config.json").is_file():
        return path
    config = Qwen2Config(**QWEN25_7B, dtype="bfloat16")
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(path, max_shard_size="5GB")
    save_tokenizer(path, tokenizer_dir)
    del model
    torch.cuda.empty_cache()
    return path


def main() -> int:
    from randopt.runtime.cli import run_stage

    return run_stage("vllm_bench", bench)


def bench() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    parser.add_argument("--tokenizer", default=None, help="a model dir whose tokenizer to use (default: SmolLM2's)")
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--prompts", type=int, default=128)
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--tp", type=int, default=1, help="tensor_parallel_size (GPUs of one engine)")
    parser.add_argument("--keep-model", action="store_true",
                        help="leave the random model in /tmp/randopt-bench for a next run (e.g. at another --tp)")
    args = parser.parse_args()
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    from randopt.engines.factory import make_engine
    from randopt.data.synth import generate_problems

    t0 = time.perf_counter()
    model_dir = build_random_7b(Path("/tmp/randopt-bench/qwen2.5-7b-random"), args.tokenizer)
    build_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    engine = make_engine("vllm", str(model_dir), batch_size=256, max_context=1024, tensor_parallel_size=args.tp)
    start_s = time.perf_counter() - t0
    prompts = [engine.chat_prompt(p["question"]) for p in generate_problems(args.prompts, 5, "easy")]
    ids = [TokensPrompt(prompt_token_ids=engine.tokenizer(p, add_special_tokens=False)["input_ids"]) for p in prompts]
    params = SamplingParams(temperature=0.0, max_tokens=args.tokens, ignore_eos=True)
    engine.llm.generate(ids, params, use_tqdm=False)  # warm-up
    rows = []
    loop_start = time.perf_counter()
    for seed in range(args.seeds):
        a = time.perf_counter()
        engine.set_weights(seed, 1e-3)
        b = time.perf_counter()
        outs = engine.llm.generate(ids, params, use_tqdm=False)
        c = time.perf_counter()
        rows.append({"seed": seed, "switch_ms": 1000 * (b - a), "generate_s": c - b,
                     "tokens": sum(len(o.outputs[0].token_ids) for o in outs)})
    loop_s = time.perf_counter() - loop_start
    gen_s = sum(r["generate_s"] for r in rows)
    tokens = sum(r["tokens"] for r in rows)
    result = {
        "gpu": torch.cuda.get_device_name(0), "tensor_parallel_size": args.tp,
        "model": "random Qwen2.5-7B-shaped bf16", "setup": engine.setup,
        "engine_core": ("in this process" if os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "0"
                        else "a separate process"),
        "protocol": {"prompts": args.prompts, "max_tokens": args.tokens, "ignore_eos": True, "seeds": args.seeds},
        "build_model_s": build_s, "engine_start_s": start_s, "per_seed": rows,
        "gen_tokens_per_s": tokens / gen_s, "seeds_per_s": args.seeds / loop_s,
        "switch_ms_mean": sum(r["switch_ms"] for r in rows) / len(rows),
        "loop_overhead": (loop_s - gen_s) / loop_s,
        "anchor_tokens_per_s_h100": 9045, "ratio_to_anchor": tokens / gen_s / 9045,
    }
    print(f"{'generated tokens/s':28s} {result['gen_tokens_per_s']:10.0f}  ({result['ratio_to_anchor']:.2f}x the anchor's 9,045)")
    print(f"{'seeds/s':28s} {result['seeds_per_s']:10.3f}")
    print(f"{'switch ms per seed':28s} {result['switch_ms_mean']:10.2f}")
    print(f"{'seed-loop overhead':28s} {100 * result['loop_overhead']:9.2f}%")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = "vllm_bench.json" if args.tp == 1 else f"vllm_bench_tp{args.tp}.json"
    (out / name).write_text(json.dumps(result, indent=2, default=str))
    print(json.dumps(result, indent=2, default=str))
    if not args.keep_model:
        shutil.rmtree("/tmp/randopt-bench", ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
