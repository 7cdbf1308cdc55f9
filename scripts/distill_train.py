"""distill_train: a LoRA fine-tune of the base model on one distillation dataset, written as the adapter,
the merged model dir (checkpoint dtype) and a manifest. The stage: randopt/stages/distill_train.py."""
from __future__ import annotations

import argparse

from randopt.runtime.cli import json_arg, run_stage
from randopt.runtime.gpu_job import add_gpu_job_args, claim_gpu
from randopt.stages import distill_train


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m scripts.distill_train", description=__doc__)
    p.add_argument("--base-dir", required=True, help="the base model dir (prepare_model's)")
    p.add_argument("--base-manifest", required=True, help="its manifest (its weights' sha256)")
    p.add_argument("--data", required=True, help="JSONL: distill_data's distilled or control dataset")
    p.add_argument("--arm", required=True, choices=["distilled", "control"])
    p.add_argument("--round", dest="round_index", type=int, default=1)
    p.add_argument("--lora", type=json_arg, required=True, help="JSON: the config's distill.lora block")
    p.add_argument("--train", type=json_arg, required=True, help="JSON: the config's distill.train block")
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


def main(argv=None) -> int:
    args = parse_args(argv)
    return run_stage("distill_train", lambda: distill_train.run(**claim_gpu(args, args.device)))


if __name__ == "__main__":
    raise SystemExit(main())
