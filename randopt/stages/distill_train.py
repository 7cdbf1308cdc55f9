"""distill_train: a LoRA fine-tune of the base model on one of distill_data's datasets
(randopt/distill/train.py), written as the adapter, the merged model dir in the checkpoint dtype
(randopt/distill/merge.py) and a manifest naming the data's and the base's sha256.

A kill mid-way leaves no output (each is written atomically, the manifest last); the workflow reruns
the stage whole, and the same seed gives the same weights.
"""
from __future__ import annotations

import time

from randopt.distill.merge import write_adapter, write_merged
from randopt.distill.train import train_lora
from randopt.io import read_json, read_jsonl, sha256_file, verify_against_manifest, write_json_atomic
from randopt.model.prepare import combined_sha256
from randopt.runtime.log import log


def run(*, base_dir: str, base_manifest: str, data: str, arm: str, round_index: int, lora: dict, train: dict,
        out_model: str, out_adapter: str, manifest: str, device: str = "cpu", threads: int | None = None,
        trust_remote_code: bool = False, compute_dtype: str = "float32") -> None:
    start = time.perf_counter()
    verify_against_manifest(data)
    rows = read_jsonl(data, required=("prompt", "completion"))
    trained = train_lora(base_dir, rows, lora, train, device=device, threads=threads,
                         trust_remote_code=trust_remote_code, bf16=compute_dtype == "bfloat16")
    log.info("%s: %d steps, train loss %.4f", arm, trained.steps, trained.train_loss)
    adapter_sha256 = write_adapter(trained.model, out_adapter)
    weights = write_merged(trained.model, trained.tokenizer, trained.checkpoint_dtype, out_model)
    write_json_atomic(manifest, {
        "stage": "distill_train", "arm": arm, "round": round_index,
        "base_sha256": read_json(base_manifest)["sha256"], "data_sha256": sha256_file(data), "examples": len(rows),
        "sha256": combined_sha256(weights), "weights": weights, "adapter_sha256": adapter_sha256,
        "dtype": str(trained.checkpoint_dtype).removeprefix("torch."), "lora": lora, "train": train,
        "compute_dtype": compute_dtype, "steps": trained.steps, "train_loss": trained.train_loss, "seconds": time.perf_counter() - start})
