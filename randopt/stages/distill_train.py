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
from randopt.runtime.cli import run_stage
from randopt.runtime.gpu_job import add_gpu_job_args, claim_gpu
from randopt.runtime.log import log
from randopt.block_files import object_block
from randopt.stages._args import stage_parser


def parse_args(argv=None):
    p = stage_parser("distill_train", __doc__)
    p.add_argument("--base-dir", required=True, help="the base model dir (prepare_model's)")
    p.add_argument("--base-manifest", required=True, help="its manifest (its weights' sha256)")
    p.add_argument("--data", required=True, help="JSONL: distill_data's distilled or control dataset")
    p.add_argument("--arm", required=True, choices=["distilled", "control"])
    p.add_argument("--round", dest="round_index", type=int, default=1)
    p.add_argument("--lora-file", dest="lora", type=object_block, required=True,
                   help="a JSON file holding the config's distill.lora block")
    p.add_argument("--train-file", dest="train", type=object_block, required=True,
                   help="a JSON file holding the config's distill.train block")
    p.add_argument("--device", default="cpu", help="where the fine-tune runs: cpu, cuda (under vLLM too), auto")
    add_gpu_job_args(p)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--compute-dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                   help="the engine's resolved compute dtype (rules/common.smk): bfloat16 trains under bf16 autocast")
    p.add_argument("--out-model", required=True, help="the merged model dir")
    p.add_argument("--out-adapter", required=True, help="the adapter dir (peft)")
    p.add_argument("--manifest", required=True)
    return p.parse_args(argv)


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


def main(argv=None) -> int:
    args = parse_args(argv)
    return run_stage("distill_train", lambda: run(**claim_gpu(args, args.device)))


if __name__ == "__main__":
    raise SystemExit(main())
