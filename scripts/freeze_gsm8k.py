r"""Freeze GSM8K train/test splits: seeded selection from a source, canonical JSONL + manifest.

    python -m scripts.freeze_gsm8k --source-json '{"kind": "jsonl", "path": "../shared/data/gsm8k"}' \
        --n-train 200 --n-test 200 --selection-seed 0 \
        --out-train data/gsm8k/mine/train.jsonl --out-test data/gsm8k/mine/test.jsonl \
        --manifest data/gsm8k/mine/manifest.json

Sources: {"kind": "generated", "seed", "n_train_pool", "n_test_pool", ["difficulty", knobs...]} |
{"kind": "jsonl", "path": <dir with train.jsonl, test.jsonl>} |
{"kind": "hub", "repo": "openai/gsm8k", "config": "main", "revision": <40-hex commit>}.
All outputs are written together or not at all; a bad input exits 2 with "error: ...".
"""
from __future__ import annotations

import argparse

from randopt.runtime.cli import (add_frozen_split_args, frozen_split_kwargs, frozen_summary, run_stage,
                                  source_json_arg)
from randopt.data.gsm8k import write_frozen


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m scripts.freeze_gsm8k", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--source-json", required=True, help="the GSM8K source, a JSON object (see below)")
    add_frozen_split_args(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    def body():
        manifest = write_frozen(source_json_arg(args.source_json), **frozen_split_kwargs(args))
        print(frozen_summary(manifest))

    return run_stage("freeze_gsm8k", body)


if __name__ == "__main__":
    raise SystemExit(main())
