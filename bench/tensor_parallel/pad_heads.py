"""A model with padded attention heads (bench/tensor_parallel/head_padding.py), and a check that it is the same model.

  python bench/tensor_parallel/pad_heads.py --src data/models/<key>/model --dst data/padded/smollm2-h12-kv4 \\
      --heads 12 --kv-heads 4 [--reuse] [--verify] [--out pad.json]

writes the padded model dir (atomically; an earlier padded dir at --dst is replaced, or with --reuse
kept when it already is this padding of --src) and prints what randopt_padding.json records.
--verify then loads both models with transformers (on the GPU when there is one, else the CPU) and
compares them on chat prompts of the default's synthetic problems: logits in fp32 and in the
checkpoint's bf16 (max abs difference, argmax agreement) and greedy completions (identical or not). Issue 16: SmolLM2-135M (9 heads, 3 kv heads) padded to 12 / 4 runs
under vLLM at tensor_parallel_size 2 (bench/tensor_parallel/h200x2_session.sh, part pad).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.tensor_parallel.head_padding import PADDING_FILE, pad_attention_heads  # noqa: E402
from randopt.model.prepare import combined_sha256, weights_sha256  # noqa: E402


def existing(src: str, dst: str, heads: int, kv_heads: int) -> dict | None:
    """randopt_padding.json of dst when dst already is src padded to these heads (same weights)."""
    path = Path(dst) / PADDING_FILE
    if not path.is_file():
        return None
    record = json.loads(path.read_text())
    if record["heads"][1] != heads or record["kv_heads"][1] != kv_heads or \
            record["source_sha256"] != combined_sha256(weights_sha256(src)) or \
            record["sha256"] != combined_sha256(weights_sha256(dst)):
        return None
    return record


def prompts(tokenizer, n: int) -> list[list[int]]:
    from randopt.data.synth import generate_problems
    texts = [tokenizer.apply_chat_template([{"role": "user", "content": p["question"]}], tokenize=False,
                                           add_generation_prompt=True) for p in generate_problems(n, 11, "easy")]
    return [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]


def compare(src: str, dst: str, n_prompts: int, max_new_tokens: int, device: str) -> dict:
    """The padded model against its source: logits per dtype, greedy completions."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(src, local_files_only=True)
    ids = prompts(tokenizer, n_prompts)
    out = {"device": device, "prompts": len(ids), "prompt_tokens": sum(map(len, ids))}
    for dtype in ("float32", "bfloat16"):
        models = [AutoModelForCausalLM.from_pretrained(d, dtype=getattr(torch, dtype), local_files_only=True)
                  .to(device).eval() for d in (src, dst)]
        diff, scale, agree, total, same, first = 0.0, 0.0, 0, 0, 0, []
        with torch.no_grad():
            for row in ids:
                x = torch.tensor([row], device=device)
                a, b = (m(x).logits[0].float() for m in models)
                diff = max(diff, float((a - b).abs().max()))
                scale = max(scale, float(a.abs().max()))
                agree += int((a.argmax(-1) == b.argmax(-1)).sum())
                total += a.shape[0]
                gens = [m.generate(x, max_new_tokens=max_new_tokens, do_sample=False, attention_mask=torch.ones_like(x),
                                   pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id)[0, len(row):].tolist()
                        for m in models]
                same += gens[0] == gens[1]
                if gens[0] != gens[1]:
                    first.append(next((i for i, (s, t) in enumerate(zip(*gens)) if s != t), min(map(len, gens))))
        out[dtype] = {"max_abs_logit_diff": diff, "max_abs_logit": scale, "argmax_agreement": agree / total,
                      "positions": total, "greedy_identical": f"{same}/{len(ids)}",
                      "first_divergence_tokens": first, "max_new_tokens": max_new_tokens}
        print(dtype, json.dumps(out[dtype]), flush=True)
        del models
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--src", required=True, help="the model dir to pad (safetensors)")
    parser.add_argument("--dst", required=True, help="the padded model dir to write")
    parser.add_argument("--heads", type=int, required=True, help="query heads after padding")
    parser.add_argument("--kv-heads", type=int, required=True, help="kv heads after padding")
    parser.add_argument("--reuse", action="store_true",
                        help="keep --dst if it already is --src padded to these heads (its sha256s say so)")
    parser.add_argument("--verify", action="store_true", help="compare the two models with transformers")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--device", default="auto", help="cuda, cpu or auto")
    parser.add_argument("--out", help="JSON result")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    kept = existing(args.src, args.dst, args.heads, args.kv_heads) if args.reuse else None
    report = {"padding": kept or pad_attention_heads(args.src, args.dst, args.heads, args.kv_heads),
              "reused": kept is not None, "pad_s": time.perf_counter() - t0}
    print(json.dumps(report, indent=1), flush=True)
    if args.verify:
        import torch
        device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
        t0 = time.perf_counter()
        report["verify"] = compare(args.src, args.dst, args.prompts, args.max_new_tokens, device)
        report["verify_s"] = time.perf_counter() - t0
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
