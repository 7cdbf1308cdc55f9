"""The vLLM engine at tensor_parallel_size > 1 against the reference and against TP 1 (issue 16).

Run on a machine with at least --tp GPUs and vllm installed, from the repo root, one engine per
process (each mode is its own process; vLLM's engines do not share one process well):
  python bench/tensor_parallel/vllm_tp.py reference --model DIR --out tp1.json
      TP 1: greedy completions (token ids) of 64 chat prompts at the base weights and at one seed,
      bpb of the synthetic held-out text, and TP 1's own teacher-forced agreement (a control).
      With --against OTHER.json (another model's reference, same tokenizer): this model fed the other
      model's base completions (teacher-forced agreement), free-running identity and bpb against its own
      (e.g. SmolLM2 against its head-padded copy, bench/tensor_parallel/pad_heads.py: the same function at base).
  python bench/tensor_parallel/vllm_tp.py check --model DIR --tp 2 --reference tp1.json --out tp2.json
      TP N: (1) weights gathered from every rank equal the reference bit for bit for several
      (seed, sigma), restore exact; (2) fed TP 1's completions, TP N's argmax (prompt_logprobs
      rank 1) equals TP 1's token at >= 98 % of positions; free-running identity and bpb reported.
  python bench/tensor_parallel/vllm_tp.py build-7b --dir DIR [--layers 2] [--vocab 151655]
      a random Qwen2.5-7B-shaped model (7B's widths, heads, fused qkv / gate_up, untied lm_head) with
      fewer layers and a vocabulary that is no multiple of 64, so vLLM pads it on every rank.
  python bench/tensor_parallel/vllm_tp.py weights --model DIR --tp 2 --out w.json      (check's part (1) alone)
The engine is built with the workflow's options (batch_size 256, gpu_memory_utilization auto), so
a run here also warms vLLM's compile cache for the workflow's stages on the same model path.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from randopt.kernels.noise_ref import reconstruct_reference_  # noqa: E402

CASES = [(3, 1e-3), (7, 2e-2), (11, 4e-3)]
PERTURBED = (5, 4e-3)  # the seed whose completions are compared besides the base's


def log(*args):
    print(*args, flush=True)


def make(model: str, tp: int):
    from randopt.engines.factory import make_engine
    t0 = time.perf_counter()
    engine = make_engine("vllm", model, device="cuda", batch_size=256, tensor_parallel_size=tp,
                         gpu_memory_utilization=os.environ.get("RANDOPT_TP_GPU_UTIL", "auto"))
    start = time.perf_counter() - t0
    log(f"engine up at tp={tp} in {start:.1f} s")
    return engine, start


def checkpoint_tensors(model_dir: str, device: str) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file
    out = {}
    for path in sorted(Path(model_dir).glob("*.safetensors")):
        out.update({k: v.to(device) for k, v in load_file(str(path)).items()})
    return out


def check_weights(engine, model_dir: str, cases, device: str) -> dict:
    """Per (seed, sigma): every checkpoint tensor gathered from all ranks vs the pure-torch reference,
    bit for bit; then restore vs the checkpoint. Also counts elements the seed moved, so a check
    that compares unperturbed weights with themselves cannot pass unnoticed."""
    base = checkpoint_tensors(model_dir, device)
    result = {"tensors": len(base), "elements": sum(t.numel() for t in base.values()), "cases": []}
    for seed, sigma in cases:
        t0 = time.perf_counter()
        engine.set_weights(seed, sigma)
        live = engine.read_weights()
        read_s = time.perf_counter() - t0
        equal, moved, bad = 0, 0, []
        for name in sorted(base):
            want = torch.empty_like(base[name])
            reconstruct_reference_(want, base[name], seed, sigma, name)
            got = live.get(name)
            if got is not None and got.shape == want.shape and torch.equal(got.to(device), want):
                equal += 1
            else:
                bad.append(name)
            moved += int((want != base[name]).sum())
        case = {"seed": seed, "sigma": sigma, "bit_equal": equal, "tensors": len(base), "mismatched": bad[:10],
                "elements_moved": moved, "set_and_read_s": read_s}
        log("weights", json.dumps(case))
        result["cases"].append(case)
        del live
    engine.restore_base()
    live = engine.read_weights()
    result["restore_equals_checkpoint"] = all(n in live and torch.equal(live[n].to(device), base[n]) for n in base)
    result["all_bit_equal"] = all(c["bit_equal"] == c["tensors"] and c["elements_moved"] > 0 for c in result["cases"])
    log("restore exact:", result["restore_equals_checkpoint"])
    return result


def prompts_for(engine, n=64) -> list[list[int]]:
    from randopt.data.synth import generate_problems
    texts = [engine.chat_prompt(p["question"]) for p in generate_problems(n, 11, "easy")]
    return [engine.tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]


def greedy_ids(engine, prompt_ids: list[list[int]], max_tokens=64) -> list[list[int]]:
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens)
    outs = engine.llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompt_ids], params, use_tqdm=False)
    return [list(o.outputs[0].token_ids) for o in outs]


def agreement(engine, prompt_ids, completions) -> dict:
    """Teacher forcing: fed prompt + completion, the share of completion positions whose argmax
    (prompt_logprobs rank 1) is the completion's own token."""
    scored = engine.score_token_ids([p + c for p, c in zip(prompt_ids, completions)])
    hits = total = 0
    for p, c, (_, ranks) in zip(prompt_ids, completions, scored):
        r = ranks[len(p) - 1:len(p) - 1 + len(c)]  # ranks[j] is the rank of token j + 1
        hits += int((r == 1).sum())
        total += len(r)
    return {"positions": total, "argmax_agreement": hits / max(total, 1)}


def free_running(a: list[list[int]], b: list[list[int]]) -> dict:
    first = [next((i for i, (x, y) in enumerate(zip(s, t)) if x != y), min(len(s), len(t)))
             for s, t in zip(a, b) if s != t]
    return {"identical": f"{sum(s == t for s, t in zip(a, b))}/{len(a)}",
            "median_first_divergence_token": statistics.median(first) if first else None}


def bpb(engine) -> dict:
    import numpy as np

    from randopt.ensemble.bpb import model_bpb
    from randopt.data.heldout import synthetic_heldout
    texts = [d["text"] for d in synthetic_heldout(32, 7)]  # the default protocol's held-out text
    try:
        lp = np.concatenate([s.logprobs for s in engine.token_logprobs(texts)])
    except ValueError as err:  # seen on a model whose max_model_len equals the scoring window
        return {"error": str(err)[:300]}
    return {"tokens": int(lp.size), "bpb": model_bpb(lp, sum(len(t.encode()) for t in texts))}


def completions_at(engine, prompt_ids, seed_sigma) -> list[list[int]]:
    if seed_sigma is None:
        engine.restore_base()
    else:
        engine.set_weights(*seed_sigma)
    return greedy_ids(engine, prompt_ids)


def reference(args) -> dict:
    engine, start = make(args.model, 1)
    prompt_ids = prompts_for(engine)
    report = {"tp": 1, "engine_start_s": start, "setup": engine.setup, "prompt_ids": prompt_ids, "runs": {}}
    for label, ss in (("base", None), (f"seed={PERTURBED[0]},sigma={PERTURBED[1]}", PERTURBED)):
        comps = completions_at(engine, prompt_ids, ss)
        report["runs"][label] = {"completions": comps, "self_agreement": agreement(engine, prompt_ids, comps)}
        log(label, "TP 1 self agreement", report["runs"][label]["self_agreement"])
    engine.restore_base()
    report["bpb"] = bpb(engine)
    log("bpb", report["bpb"])
    if args.against:
        report["against"] = against(engine, prompt_ids, report, json.loads(Path(args.against).read_text()))
        report["against"]["reference"] = args.against
        log("against", json.dumps(report["against"]))
    return report


def against(engine, prompt_ids, mine: dict, other: dict) -> dict:
    """This model (at base) against another model's reference: only the base weights are compared, a
    seed of one model is not the same perturbation of the other."""
    if other["prompt_ids"] != prompt_ids:
        return {"error": "the other reference's prompts tokenize differently: not the same tokenizer"}
    theirs = other["runs"]["base"]["completions"]
    out = {"other_model_dir": other.get("model_dir"),
           "teacher_forced_on_other": agreement(engine, prompt_ids, theirs),
           "other_self_agreement": other["runs"]["base"]["self_agreement"],
           "free_running_vs_other": free_running(theirs, mine["runs"]["base"]["completions"]),
           "bpb": mine["bpb"].get("bpb"), "bpb_other": other.get("bpb", {}).get("bpb")}
    if out["bpb"] is not None and out["bpb_other"] is not None:
        out["bpb_relative_difference"] = abs(out["bpb"] - out["bpb_other"]) / out["bpb_other"]
    return out


def check(args) -> dict:
    ref = json.loads(Path(args.reference).read_text())
    engine, start = make(args.model, args.tp)
    report = {"tp": args.tp, "engine_start_s": start, "setup": engine.setup,
              "weights": check_weights(engine, args.model, CASES, args.ref_device), "runs": {}}
    prompt_ids = ref["prompt_ids"]
    for label, ss in (("base", None), (f"seed={PERTURBED[0]},sigma={PERTURBED[1]}", PERTURBED)):
        comps = completions_at(engine, prompt_ids, ss)
        theirs = ref["runs"][label]["completions"]
        run = {"teacher_forced_on_tp1": agreement(engine, prompt_ids, theirs),
               "tp1_self_agreement": ref["runs"][label]["self_agreement"],
               "free_running_vs_tp1": free_running(theirs, comps)}
        report["runs"][label] = run
        log(label, json.dumps(run))
    engine.restore_base()
    report["bpb"] = bpb(engine) | {"bpb_tp1": ref["bpb"].get("bpb")}
    if "bpb" in ref["bpb"] and "error" not in report["bpb"]:
        report["bpb"]["relative_difference"] = abs(report["bpb"]["bpb"] - ref["bpb"]["bpb"]) / ref["bpb"]["bpb"]
    log("bpb", report["bpb"])
    return report


def weights(args) -> dict:
    engine, start = make(args.model, args.tp)
    return {"tp": args.tp, "engine_start_s": start, "setup": engine.setup,
            "weights": check_weights(engine, args.model, CASES, args.ref_device)}


def build_7b(args) -> dict:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from bench.vllm.vllm_bench import QWEN25_7B
    from randopt.model.prepare import save_tokenizer
    path = Path(args.dir)
    shape = dict(QWEN25_7B, num_hidden_layers=args.layers, vocab_size=args.vocab)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = Qwen2ForCausalLM(Qwen2Config(**shape, dtype="bfloat16")).to(torch.bfloat16)
    model.save_pretrained(path, max_shard_size="2GB")  # several files: the reader must join them
    save_tokenizer(path, None)
    return {"model": "random Qwen2.5-7B-shaped bf16", "config": shape,
            "parameters": sum(p.numel() for p in model.parameters())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["reference", "check", "weights", "build-7b"])
    parser.add_argument("--model", help="a model dir with safetensors weights")
    parser.add_argument("--tp", type=int, default=2)
    parser.add_argument("--reference", help="reference mode's JSON (check mode)")
    parser.add_argument("--against", help="reference mode: another model's reference JSON to compare with at base")
    parser.add_argument("--ref-device", default="cuda", help="where the reference weights are computed")
    parser.add_argument("--dir", help="build-7b: where to write the model")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=151655, help="no multiple of 64: vLLM pads it")
    parser.add_argument("--out", help="JSON result")
    args = parser.parse_args()
    if args.mode != "build-7b" and not args.model:
        parser.error(f"{args.mode} needs --model")
    if args.mode == "check" and not args.reference:
        parser.error("check needs --reference (the reference mode's JSON)")
    if args.against and args.mode != "reference":
        parser.error("--against goes with reference mode")
    if args.mode == "build-7b" and not args.dir:
        parser.error("build-7b needs --dir")
    report = {"reference": reference, "check": check, "weights": weights, "build-7b": build_7b}[args.mode](args)
    report |= {"mode": args.mode, "model_dir": args.model or args.dir, "gpus": [
        torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]}
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=1, default=str))
    summary = {k: v for k, v in report.items() if k not in ("prompt_ids", "runs")}
    log(json.dumps(summary, default=str)[:3000])
    from randopt.engines.factory import close_engines
    close_engines()
    sys.stdout.flush()
    os._exit(0)  # as the stage CLIs do: vLLM's exit-time finalizers can abort a finished run


if __name__ == "__main__":
    raise SystemExit(main())
