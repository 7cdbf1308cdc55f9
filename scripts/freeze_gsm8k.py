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

from randopt.runtime.cli import run_stage, source_json_arg
from randopt.data.gsm8k import write_frozen


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m scripts.freeze_gsm8k", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--source-json", required=True, help="the GSM8K source, a JSON object (see below)")
    parser.add_argument("--n-train", type=int, required=True, help="problems in the frozen train split")
    parser.add_argument("--n-test", type=int, required=True, help="problems in the frozen test split")
    parser.add_argument("--selection-seed", type=int, required=True, help="seed of the selection permutation")
    parser.add_argument("--pinned-train-sha256", help="expected sha256 of the train JSONL; a mismatch is an error")
    parser.add_argument("--pinned-test-sha256", help="expected sha256 of the test JSONL; a mismatch is an error")
    parser.add_argument("--out-train", required=True, help="frozen train JSONL path")
    parser.add_argument("--out-test", required=True, help="frozen test JSONL path")
    parser.add_argument("--manifest", required=True, help="manifest JSON path")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    def body():
        manifest = write_frozen(
            source_json_arg(args.source_json), args.n_train, args.n_test, args.selection_seed,
            out_train=args.out_train, out_test=args.out_test, manifest=args.manifest,
            pinned_train_sha256=args.pinned_train_sha256, pinned_test_sha256=args.pinned_test_sha256,
        )
        print(f"froze {manifest['train']['n']} train / {manifest['test']['n']} test problems "
              f"(train sha256 {manifest['train']['sha256']}, test sha256 {manifest['test']['sha256']})")

    return run_stage("freeze_gsm8k", body)


if __name__ == "__main__":
    raise SystemExit(main())
