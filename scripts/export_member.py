"""export_member: one member (seed, sigma) of a search as a Hugging Face model dir, rebuilt bit-exact
from the prepared base (safetensors in the checkpoint dtype, config, tokenizer, randopt_member.json)."""
from __future__ import annotations

import argparse
import json

from randopt.cli import run_stage
from randopt.export import export_member


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m scripts.export_member", description=__doc__)
    p.add_argument("--model-dir", required=True, help="the prepared base model dir (prepare_model's output)")
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--sigma", type=float, required=True)
    p.add_argument("--out", required=True, help="the new model dir (written atomically)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    return run_stage("export_member", lambda: print(json.dumps(
        export_member(args.model_dir, args.seed, args.sigma, args.out), indent=2)))


if __name__ == "__main__":
    raise SystemExit(main())
