r"""freeze_task: a task's train/test splits (every task but GSM8K, which has freeze_gsm8k), a seeded
selection from the task's source, as canonical JSONL and a manifest naming the task
(randopt/tasks/freeze.py write_frozen).

    python -m randopt.stages.freeze_task --task-json '{"kind": "countdown", "seed": 1, ...}' \
        --n-train 16 --n-test 48 --selection-seed 0 \
        --out-train data/tasks/mine/train.jsonl --out-test data/tasks/mine/test.jsonl \
        --manifest data/tasks/mine/manifest.json

--task-json is the config's task.<kind> block with its kind (randopt/config.py task_spec).
All outputs are written together or not at all; a bad input exits 2 with "error: ...".
"""
from __future__ import annotations

from randopt.runtime.cli import run_stage
from randopt.stages._args import add_frozen_split_args, frozen_split_kwargs, frozen_summary, json_arg, stage_parser
from randopt.tasks.freeze import write_frozen


def parse_args(argv=None):
    p = stage_parser("freeze_task", __doc__)
    p.add_argument("--task-json", required=True, type=json_arg, help="the task, a JSON object {\"kind\", **its block}")
    add_frozen_split_args(p)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)

    def body():
        manifest = write_frozen(args.task_json, **frozen_split_kwargs(args))
        print(frozen_summary(manifest, f"{manifest['task']['kind']} "))

    return run_stage("freeze_task", body)


if __name__ == "__main__":
    raise SystemExit(main())
