"""export_member: one member (seed, sigma) of a search as a Hugging Face model dir, rebuilt bit-exact
from the prepared base (safetensors in the checkpoint dtype, config, tokenizer, randopt_member.json;
randopt/result/export.py). Prints what it wrote, as JSON."""
from __future__ import annotations

import json

from randopt.kernels.noise_kinds import KINDS, RADEMACHER
from randopt.result.export import export_member, export_rank
from randopt.runtime.cli import run_stage
from randopt.stages._args import stage_parser


def parse_args(argv=None):
    p = stage_parser("export_member", __doc__)
    p.add_argument("--model-dir", required=True, help="the prepared base model dir (prepare_model's output)")
    p.add_argument("--seed", type=int, help="the member's seed (with --sigma)")
    p.add_argument("--sigma", type=float, help="the member's sigma (with --seed)")
    p.add_argument("--ranking", help="rank's ranking.parquet (with --rank, instead of --seed/--sigma)")
    p.add_argument("--rank", type=int, help="the member's rank in --ranking (1 = best)")
    p.add_argument("--out", required=True, help="the new model dir (written atomically)")
    p.add_argument("--noise", default=RADEMACHER, choices=KINDS,
                   help="the run's perturbation.noise (default: %(default)s); a member is its seed under that noise")
    args = p.parse_args(argv)
    if (args.ranking is None) == (args.seed is None) or (args.seed is None) != (args.sigma is None) \
            or (args.ranking is None) != (args.rank is None):
        p.error("give either --seed and --sigma, or --ranking and --rank")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    return run_stage("export_member", lambda: print(json.dumps(
        export_rank(args.model_dir, args.ranking, args.rank, args.out, args.noise) if args.ranking
        else export_member(args.model_dir, args.seed, args.sigma, args.out, args.noise), indent=2)))


if __name__ == "__main__":
    raise SystemExit(main())
