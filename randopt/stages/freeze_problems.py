r"""freeze_problems: the run's task's train/test splits, GSM8K's as every other task's: a seeded selection
from the task's source, as canonical JSONL and a manifest naming the task (randopt/tasks/freeze.py
write_frozen, randopt/data/splits.py).

    python -m randopt.stages.freeze_problems \
        --task-file task.json \
        --n-train 200 --n-test 200 --selection-seed 0 \
        --out-train data/problems/mine/train.jsonl --out-test data/problems/mine/test.jsonl \
        --manifest data/problems/mine/manifest.json

--task-file is a JSON file holding the run's task (randopt/config.py task_spec): the config's task.<kind> block
with its kind (docs/tasks.md), e.g. {"kind": "gsm8k", "source": "jsonl", "jsonl": {"path": "../shared/data/gsm8k"}};
the workflow writes it (randopt/block_files.py). All outputs are written together or not at all; a bad input exits 2 with "error: ...".
"""
from __future__ import annotations

from randopt.block_files import object_text, read_block
from randopt.runtime.cli import run_stage
from randopt.stages._args import add_frozen_split_args, frozen_split_kwargs, frozen_summary, stage_parser
from randopt.tasks.freeze import write_frozen


def parse_args(argv=None):
    p = stage_parser("freeze_problems", __doc__)
    p.add_argument("--task-file", required=True,
                   help="a JSON file holding the task, an object {\"kind\", **its block}")
    add_frozen_split_args(p)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)

    def body():
        # read here, not by argparse, so that a missing or malformed file is an "error: ..." naming it (exit 2)
        manifest = write_frozen(read_block(args.task_file, object_text), **frozen_split_kwargs(args))
        print(frozen_summary(manifest, f"{manifest['task']['kind']} "))

    return run_stage("freeze_problems", body)


if __name__ == "__main__":
    raise SystemExit(main())
