r"""freeze_problems: the run's task's train/test splits, GSM8K's as every other task's: a seeded selection
from the task's source, as canonical JSONL and a manifest naming the task (randopt/tasks/freeze.py
write_frozen, randopt/data/splits.py).

    python -m randopt.stages.freeze_problems \
        --task-json '{"kind": "gsm8k", "source": "jsonl", "jsonl": {"path": "../shared/data/gsm8k"}}' \
        --n-train 200 --n-test 200 --selection-seed 0 \
        --out-train data/problems/mine/train.jsonl --out-test data/problems/mine/test.jsonl \
        --manifest data/problems/mine/manifest.json

--task-json is the run's task (randopt/config.py task_spec): the config's task.<kind> block with its kind
(docs/tasks.md). All outputs are written together or not at all; a bad input exits 2 with "error: ...".
"""
from __future__ import annotations

from randopt.io import json_object
from randopt.runtime.cli import run_stage
from randopt.stages._args import add_frozen_split_args, frozen_split_kwargs, frozen_summary, stage_parser
from randopt.tasks.freeze import write_frozen


def parse_args(argv=None):
    p = stage_parser("freeze_problems", __doc__)
    p.add_argument("--task-json", required=True, help="the task, a JSON object {\"kind\", **its block}")
    add_frozen_split_args(p)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)

    def body():
        # parsed here, not by argparse, so that malformed JSON is an "error: ..." naming the flag (exit 2)
        task = json_object(args.task_json, "--task-json", f": {args.task_json!r}")
        manifest = write_frozen(task, **frozen_split_kwargs(args))
        print(frozen_summary(manifest, f"{manifest['task']['kind']} "))

    return run_stage("freeze_problems", body)


if __name__ == "__main__":
    raise SystemExit(main())
