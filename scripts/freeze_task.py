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

from randopt.runtime.cli import add_frozen_split_args, frozen_split_kwargs, frozen_summary, json_arg, run_stage
from randopt.tasks.freeze import write_frozen


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m scripts.freeze_task", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--task-json", required=True, type=json_arg, help="the task, a JSON object {\"kind\", **its block}")
    add_frozen_split_args(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    def body():
        manifest = write_frozen(args.task_json, **frozen_split_kwargs(args))
        print(frozen_summary(manifest, f"{manifest['task']['kind']} "))

    return run_stage("freeze_task", body)


if __name__ == "__main__":
    raise SystemExit(main())
