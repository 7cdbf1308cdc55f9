"""record: gather every stage's output into results/record.json and append a row to RECORDS.md.
The stage: randopt/stages/record.py."""
from __future__ import annotations

import argparse
from functools import partial

from randopt.runtime.cli import json_arg, run_stage
from randopt.stages import record


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m scripts.record", description=__doc__)
    p.add_argument("--config-json", dest="config", required=True, type=json_arg, help="the validated config, as JSON")
    p.add_argument("--repo-dir", required=True, help="the workflow's code dir (for the commit, or the code's hash)")
    p.add_argument("--model-manifest", required=True)
    p.add_argument("--problems-manifest", required=True, help="the frozen splits' manifest (freeze_gsm8k or freeze_task)")
    p.add_argument("--heldout-manifest", required=True)
    p.add_argument("--topk", required=True)
    p.add_argument("--ranking", required=True, help="rank's ranking table (parquet)")
    p.add_argument("--vote", required=True)
    p.add_argument("--bpb", required=True)
    p.add_argument("--shard-timings", nargs="+", required=True)
    p.add_argument("--members-timings", required=True)
    p.add_argument("--base-train", required=True, help="evaluate_members' base_train.json")
    p.add_argument("--benchmarks", nargs="+", required=True, help="RULE=PATH Snakemake benchmark files")
    p.add_argument("--records-md", required=True)
    p.add_argument("--engines", type=json_arg, default=None,
                   help='JSON: engines side by side a device and why, {"engines_per_gpu": N, "why": ...} (rules/common.smk ENGINES)')
    p.add_argument("--distill-data", default=None, help="distill.enabled: distill_data's manifest")
    p.add_argument("--distill-models", nargs="+", default=None, help="distill.enabled: distill_train's manifest of each arm")
    p.add_argument("--distill-results", nargs="+", default=None,
                   help="distill.enabled: evaluate_distilled's result of each arm")
    p.add_argument("--out", required=True)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = vars(parse_args(argv))
    parts = {k: args.pop(f"distill_{k}") for k in ("data", "models", "results")}
    distill = parts if parts["data"] else None
    return run_stage("record", partial(record.run, **args, distill=distill))


if __name__ == "__main__":
    raise SystemExit(main())
