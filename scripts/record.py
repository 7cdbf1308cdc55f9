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
    p.add_argument("--distill-round", nargs=8, action="append", default=None, dest="distill_rounds",
                   metavar=("BASE", "VOTE", "BPB", "DATA", "MODEL", "MODEL", "RESULT", "RESULT"),
                   help="distill.enabled, once per round in order: the round's base model manifest, vote, bpb, "
                        "distill_data's manifest, distill_train's manifest of each arm and evaluate_distilled's "
                        "result of each arm")
    p.add_argument("--selection-auto", type=json_arg, default=None,
                   help='JSON: what selection.mode auto chose and why, {"requested": "auto", "mode": ..., "why": ...}')
    p.add_argument("--full-ranking", default=None, help="racing: a full evaluation's ranking of the same population")
    p.add_argument("--full-topk", default=None, help="racing: that full evaluation's topk.json")
    p.add_argument("--out", required=True)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = vars(parse_args(argv))
    rounds = [{"base": f[0], "vote": f[1], "bpb": f[2], "data": f[3], "models": f[4:6], "results": f[6:8]}
              for f in args.pop("distill_rounds") or []]
    return run_stage("record", partial(record.run, **args, distill=rounds or None))


if __name__ == "__main__":
    raise SystemExit(main())
