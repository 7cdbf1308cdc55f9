r"""freeze_gsm8k: GSM8K's train/test splits, a seeded selection from a source, as canonical JSONL and a
manifest (randopt/data/gsm8k.py write_frozen).

    python -m randopt.stages.freeze_gsm8k --source-json '{"kind": "jsonl", "path": "../shared/data/gsm8k"}' \
        --n-train 200 --n-test 200 --selection-seed 0 \
        --out-train data/gsm8k/mine/train.jsonl --out-test data/gsm8k/mine/test.jsonl \
        --manifest data/gsm8k/mine/manifest.json

Sources: {"kind": "generated", "seed", "n_train_pool", "n_test_pool", ["difficulty", knobs...]} |
{"kind": "jsonl", "path": <dir with train.jsonl, test.jsonl>} |
{"kind": "hub", "repo": "openai/gsm8k", "config": "main", "revision": <40-hex commit>}.
All outputs are written together or not at all; a bad input exits 2 with "error: ...".
"""
from __future__ import annotations

from randopt.data.gsm8k import write_frozen
from randopt.runtime.cli import run_stage
from randopt.stages._args import add_frozen_split_args, frozen_split_kwargs, frozen_summary, source_json_arg, stage_parser


def parse_args(argv=None):
    p = stage_parser("freeze_gsm8k", __doc__)
    p.add_argument("--source-json", required=True, help="the GSM8K source, a JSON object (see below)")
    add_frozen_split_args(p)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    return run_stage("freeze_gsm8k", lambda: print(frozen_summary(
        write_frozen(source_json_arg(args.source_json), **frozen_split_kwargs(args)))))


if __name__ == "__main__":
    raise SystemExit(main())
