"""Would draft-and-verify pay in the torch engine on a CPU? (issue 31, item 3)

Speculation turns one decode step per token into one verification step per (accepted drafts + 1)
tokens; a verification step feeds 1 + k tokens a row instead of 1. It pays when

    tokens per verification step  >  cost(1 + k tokens a row) / cost(1 token a row)

On a GPU the right side is near 1 (a decode step reads every weight for a handful of FLOPs a byte);
on a CPU it is what this script measures: the torch engine's model (SmolLM2-135M through
randopt's TorchEngine, its compute dtype), a batch of --batch real GSM8K prompts in the project's
chat prompt, prefilled once with --context generated tokens appended, then forward passes of q = 1
and q = 1 + k new tokens a row over that KV cache, interleaved (--reps rounds, median), for each k.
The left side comes from the H200 arms (bench/speculation/speculation.py: accepted / proposed).

    python bench/speculation/cpu_verify_cost.py --model-dir M --train ../shared/data/gsm8k/train.jsonl \\
        --batch 32 --ks 2 4 8 --out bench/results/speculation/speculation_cpu_verify_cost.json
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", required=True)
    p.add_argument("--train", required=True)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--context", type=int, default=96, help="generated tokens already in the cache")
    p.add_argument("--ks", type=int, nargs="+", default=[2, 4, 8])
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)

    import torch
    from randopt.engines.torch_engine import TorchEngine
    from randopt.io import read_jsonl, write_json_atomic
    from randopt.scoring.scorer import DecodeSpec, build_prompts

    engine = TorchEngine(args.model_dir, device="cpu", batch_size=args.batch, threads=args.threads)
    spec = DecodeSpec.from_config({})
    prompts = build_prompts(engine, read_jsonl(args.train)[:args.batch], spec)
    ids = [engine.tokenizer(t, add_special_tokens=False)["input_ids"] for t in prompts]
    model, width = engine.model, max(map(len, ids))
    tokens = torch.full((len(ids), width + args.context), engine.tokenizer.pad_token_id, dtype=torch.long)
    for r, row in enumerate(ids):   # left-padded prompts, then --context arbitrary tokens of the vocabulary
        tokens[r, width - len(row):width] = torch.tensor(row)
    tokens[:, width:] = torch.randint(100, 1000, (len(ids), args.context), generator=torch.Generator().manual_seed(0))
    mask = (tokens != engine.tokenizer.pad_token_id).long()

    import copy
    from transformers import DynamicCache
    cache_kwarg = engine._cache_kwarg  # the name this transformers gives the KV cache argument
    prefilled = DynamicCache(config=model.config)
    with torch.inference_mode():   # the prompts and the tokens already written: once
        model(input_ids=tokens, attention_mask=mask, use_cache=True, **{cache_kwarg: prefilled})

    def step(q: int) -> float:
        kv = copy.deepcopy(prefilled)   # every step extends the same cache
        new = torch.randint(100, 1000, (len(ids), q), generator=torch.Generator().manual_seed(q))
        full_mask = torch.cat([mask, torch.ones(len(ids), q, dtype=torch.long)], 1)
        t = time.perf_counter()
        with torch.inference_mode():
            model(input_ids=new, attention_mask=full_mask, use_cache=True, **{cache_kwarg: kv})
        return time.perf_counter() - t

    qs = [1] + [1 + k for k in args.ks]
    times = {q: [] for q in qs}
    for q in qs:
        step(q)  # warm-up
    for _ in range(args.reps):
        for q in qs:     # interleaved, so load on a shared machine falls on every q alike
            times[q].append(step(q))
    median = {q: statistics.median(v) for q, v in times.items()}
    rows = [{"k": q - 1, "tokens_a_row": q, "ms": 1e3 * median[q], "cost_ratio": median[q] / median[1]} for q in qs]
    for r in rows:
        print(f"q={r['tokens_a_row']:>2}: {r['ms']:.1f} ms a step, {r['cost_ratio']:.2f}x a 1-token step")
    write_json_atomic(Path(args.out), {
        "question": "cost of a (1+k)-token verification step against a 1-token decode step, torch engine on the CPU",
        "model_dir": args.model_dir, "batch": args.batch, "prompt_tokens_max": width, "context": args.context,
        "reps": args.reps, "compute_dtype": str(engine.compute_dtype).removeprefix("torch."),
        "threads": torch.get_num_threads(), "rows": rows,
        "machine": {"cpu": _cpu_model(), "cpu_count": os.cpu_count(), "cpu_flags": _bf16_flags(),
                    "python": platform.python_version(),
                    "torch": torch.__version__, "load_average": os.getloadavg()}})


def _cpu_model() -> str | None:
    info = Path("/proc/cpuinfo")
    return next((line.split(":", 1)[1].strip() for line in info.read_text().splitlines()
                 if line.startswith("model name")), None) if info.exists() else None


def _bf16_flags() -> list[str]:
    info = Path("/proc/cpuinfo")
    flags = next((line.split(":", 1)[1].split() for line in info.read_text().splitlines()
                  if line.startswith("flags")), []) if info.exists() else []
    return [f for f in ("avx512_bf16", "amx_bf16", "avx2") if f in flags]


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    main()
