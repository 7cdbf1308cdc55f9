"""The embedded default's cost per seed on this CPU, per compute dtype, against plain `generate`.

    .venv/bin/python bench/cpu_default/cpu_default.py --out DIR        # writes DIR/cpu_default.json

For each compute dtype (bfloat16, float32) it times, in one process and interleaved seed by seed:
- the engine: one seed of the default protocol exactly as evaluate_shard runs it (switch to
  (seed, sigma), greedy-generate the default's train prompts with its stop strings, score);
- the floor: plain transformers `generate` of the same prompts, left-padded in one batch, with the
  same max_new_tokens (no stop strings), on a model loaded in that dtype.
engine_over_floor = s_per_seed / floor_s_per_seed. Below 1 means the engine beats plain generate
(it prefills the prompts' shared prefix once). `auto_dtype` is what engine.compute_dtype: auto picks
here, and why. To see an AVX2-only CPU on a CPU with native bf16, run it with
ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2; `cpu.matmul_ms` shows whether the cap took effect.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from randopt.model import prepare as model_prep  # noqa: E402
from randopt.config import load_yaml, task_spec, validate  # noqa: E402
from randopt.engines import compute_dtype as cdt  # noqa: E402
from randopt.engines.factory import make_engine  # noqa: E402
from randopt.scoring.scorer import DecodeSpec, build_prompts, evaluate_weights  # noqa: E402
from randopt.tasks.freeze import freeze_splits  # noqa: E402
from randopt.io import write_json_atomic  # noqa: E402
from randopt.records.assemble import hardware, package_versions  # noqa: E402

DEFAULT_CONFIG = Path(__file__).resolve().parents[2] / "config" / "config.yaml"


def matmul_ms(dtype: torch.dtype, m: int = 32, k: int = 576, n: int = 1536, reps: int = 200) -> float:
    """A SmolLM2-shaped matmul: the quickest check that an ISA cap took effect (bf16 >> fp32 when emulated)."""
    a, b = torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype)
    for _ in range(20):
        a @ b
    start = time.perf_counter()
    for _ in range(reps):
        a @ b
    return 1000 * (time.perf_counter() - start) / reps


def prepare_inputs(config: dict, model_dir: Path | None, workdir: Path) -> tuple[Path, list[dict]]:
    if model_dir is None:
        m = config["model"]
        model_dir = workdir / "model"
        model_prep.save_from_gguf(model_prep.find_gguf(m["wheel_module"], m["gguf_file"]), model_dir, m["dtype"])
    g = config["task"]["gsm8k"]
    train, _, _ = freeze_splits(task_spec(config), g["n_train"], g["n_test"], g["selection_seed"])
    return model_dir, train


class Floor:
    """Plain transformers generate of the same prompts, as a user would write it."""

    def __init__(self, model_dir: Path, dtype: torch.dtype, prompts: list[str], max_tokens: int):
        from transformers import AutoModelForCausalLM, AutoTokenizer
        self.tok = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
        self.tok.padding_side = "left"
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, local_files_only=True).eval()
        self.enc = self.tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        self.max_tokens = max_tokens

    @torch.inference_mode()
    def run(self) -> tuple[float, int]:
        start = time.perf_counter()
        out = self.model.generate(**self.enc, max_new_tokens=self.max_tokens, do_sample=False, temperature=None,
                                  top_p=None, top_k=None, pad_token_id=self.tok.pad_token_id or self.tok.eos_token_id)
        return time.perf_counter() - start, int(out.shape[1] - self.enc["input_ids"].shape[1])


def bench_dtype(dtype: str, model_dir: Path, problems: list[dict], spec: DecodeSpec, sigma: float, seeds: int,
                batch_size: int, threads: int) -> dict:
    engine = make_engine("torch", str(model_dir), device="cpu", batch_size=batch_size,
                         threads=threads, compute_dtype=dtype)
    prompts = build_prompts(engine, problems, spec)
    floor = Floor(model_dir, getattr(torch, dtype), prompts, spec.max_tokens)
    evaluate_weights(engine, prompts, problems, spec, 10_000, sigma)   # warm-up: first-call costs
    floor.run()
    engine_s, switch_s, floor_s, gen_tokens, floor_steps = [], [], [], [], []
    for seed in range(seeds):                                           # interleaved: same machine state
        rows = evaluate_weights(engine, prompts, problems, spec, seed, sigma)
        engine_s.append(float(rows["switch_s"].iloc[0] + rows["generate_s"].iloc[0]))
        switch_s.append(float(rows["switch_s"].iloc[0]))
        gen_tokens.append(int(rows["n_tokens"].sum()))
        seconds, steps = floor.run()
        floor_s.append(seconds)
        floor_steps.append(steps)
    s, f = statistics.median(engine_s), statistics.median(floor_s)
    return {"s_per_seed": s, "floor_s_per_seed": f, "engine_over_floor": s / f,
            "switch_s_per_seed": statistics.median(switch_s), "engine_runs_s": engine_s, "floor_runs_s": floor_s,
            "engine_gen_tokens_per_seed": gen_tokens, "floor_decode_steps": floor_steps,
            }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python bench/cpu_default/cpu_default.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="folder for cpu_default.json")
    p.add_argument("--config", default=str(DEFAULT_CONFIG), help="the protocol (default: the embedded default)")
    p.add_argument("--model-dir", type=Path, default=None, help="a prepared model dir (default: prepare it here)")
    p.add_argument("--seeds", type=int, default=3, help="timed seeds per dtype (median reported)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: all cores)")
    p.add_argument("--dtypes", nargs="+", default=["bfloat16", "float32"], choices=["bfloat16", "float32"])
    args = p.parse_args(argv)

    config = validate(load_yaml(args.config))
    threads = args.threads or torch.get_num_threads()
    torch.set_num_threads(threads)
    spec = DecodeSpec.from_config(config["decode"])
    sigma = config["population"]["sigmas"][0]
    cpu = cdt.read_cpu()
    auto, why = cdt.resolve("auto", engine="torch", device="cpu", checkpoint_dtype=config["model"]["dtype"], cpu=cpu)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir, problems = prepare_inputs(config, args.model_dir, Path(tmp))
        results = {d: bench_dtype(d, model_dir, problems, spec, sigma, args.seeds, config["engine"]["batch_size"], threads)
                   for d in args.dtypes}
    report = {
        "cpu": cpu.as_dict() | {"aten_capability": torch.backends.cpu.get_cpu_capability(),
                                "isa_caps": {v: os.environ[v] for v in ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA",
                                                                        "ATEN_CPU_CAPABILITY") if v in os.environ},
                                "matmul_ms": {d: matmul_ms(getattr(torch, d)) for d in ("float32", "bfloat16")},
                                "threads": threads},
        "auto_dtype": auto, "auto_reason": why,
        "protocol": {"n_problems": len(problems), "max_tokens": spec.max_tokens, "sigma": sigma,
                     "seeds_timed": args.seeds, "config": str(args.config)},
        "s_per_seed": {d: r["s_per_seed"] for d, r in results.items()},
        "floor_s_per_seed": {d: r["floor_s_per_seed"] for d, r in results.items()},
        "engine_over_floor": {d: r["engine_over_floor"] for d, r in results.items()},
        "details": results,
        "versions": package_versions(), "hardware": hardware(),
    }
    out = Path(args.out) / "cpu_default.json"
    write_json_atomic(out, report)
    for d, r in results.items():
        print(f"{d:9s} engine {r['s_per_seed']:.2f} s/seed (switch {r['switch_s_per_seed']:.2f})  "
              f"plain generate {r['floor_s_per_seed']:.2f} s  ratio {r['engine_over_floor']:.2f}")
    print(f"auto -> {auto} ({why}); wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
