"""distill_data: the distilled dataset (the top-k members' correct train completions, from the answer
cache) and the control's (the base model's correct samples, resampled to the same size).
The stage: randopt/stages/distill_data.py."""
from __future__ import annotations

import argparse
from functools import partial

from randopt.runtime.cli import add_decode_args, json_arg, run_stage
from randopt.runtime.engine_args import add_engine_args, engine_from_args
from randopt.stages import distill_data


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m scripts.distill_data", description=__doc__)
    add_engine_args(p)
    add_decode_args(p)
    p.add_argument("--train", required=True, help="frozen train split (JSONL)")
    p.add_argument("--topk", required=True, help="rank's top-k JSON")
    p.add_argument("--fraction", type=float, required=True, help="the top-k list distilled (one of its fractions)")
    p.add_argument("--cache-dir", required=True, help="the search's answer cache (results/shards/<eval key>/cache)")
    p.add_argument("--per-problem", type=int, required=True, help="completions kept per train problem at most")
    p.add_argument("--control", type=json_arg, required=True,
                   help='JSON: the config\'s distill.control block, {"temperature", "seed", "samples_per_problem"}')
    p.add_argument("--round", dest="round_index", type=int, default=1, help="the distillation round (for messages)")
    p.add_argument("--out-distilled", required=True, help="JSONL: the distilled dataset")
    p.add_argument("--out-control", required=True, help="JSONL: the control's dataset")
    p.add_argument("--manifest", required=True, help="JSON: both files' sha256, sizes and the rule")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    return run_stage("distill_data", partial(
        distill_data.run, make_engine=partial(engine_from_args, args), decode=args.decode, train=args.train,
        topk=args.topk, fraction=args.fraction, cache_dir=args.cache_dir, per_problem=args.per_problem,
        control=args.control, round_index=args.round_index, out_distilled=args.out_distilled,
        out_control=args.out_control, manifest=args.manifest))


if __name__ == "__main__":
    raise SystemExit(main())
