r"""Freeze a task's train/test splits (every task but GSM8K, which has scripts.freeze_gsm8k): seeded
selection from the task's source, canonical JSONL + a manifest naming the task.

    python -m scripts.freeze_task --task-json '{"kind": "countdown", "seed": 1, ...}' \
        --n-train 16 --n-test 48 --selection-seed 0 \
        --out-train data/tasks/mine/train.jsonl --out-test data/tasks/mine/test.jsonl \
        --manifest data/tasks/mine/manifest.json

--task-json is the config's task.<kind> block with its kind (randopt/config.py task_spec).
All outputs are written together or not at all; a bad input exits 2 with "error: ...".
"""
from __future__ import annotations

import argparse

from randopt.runtime.cli import json_arg, run_stage
from randopt.tasks.freeze import write_frozen


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m scripts.freeze_task", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--task-json", required=True, type=json_arg, help="the task, a JSON object {\"kind\", **its block}")
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
            args.task_json, args.n_train, args.n_test, args.selection_seed,
            out_train=args.out_train, out_test=args.out_test, manifest=args.manifest,
            pinned_train_sha256=args.pinned_train_sha256, pinned_test_sha256=args.pinned_test_sha256,
        )
        print(f"froze {manifest['train']['n']} train / {manifest['test']['n']} test {manifest['task']['kind']} problems "
              f"(train sha256 {manifest['train']['sha256']}, test sha256 {manifest['test']['sha256']})")

    return run_stage("freeze_task", body)


if __name__ == "__main__":
    raise SystemExit(main())
