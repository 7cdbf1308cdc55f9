r"""score_answers: given completions scored with a task's reward, one row each: id, extracted answer,
reward, reason (randopt/tasks/offline_scoring.py). A tool, no rule of the workflow.

    python -m randopt.stages.score_answers --task countdown --problems data/problems/<key>/test.jsonl \
        --completions answers.jsonl
    python -m randopt.stages.score_answers --task '{"kind": "jsonl", "match": "numeric"}' --problems mine.jsonl \
        --completions answers.jsonl

--task: a kind (gsm8k, countdown, math, code, jsonl) with its defaults, or a JSON object of the kind and
its block's keys (config/schema.yaml definitions.task_<kind>). --problems: JSONL rows with "id" and the
task's fields (a frozen split has them). --completions: JSONL rows {"id", "completion"}.
A bad input (a bad row: "error: FILE:LINE: ...") exits 2; an empty completions file prints the header
and a warning.
"""
from __future__ import annotations

import sys

from randopt.runtime.cli import run_stage
from randopt.stages._args import stage_parser
from randopt.tasks.offline_scoring import format_rows, score_file, task_from_arg


def parse_args(argv=None):
    p = stage_parser("score_answers", __doc__)
    p.add_argument("--task", required=True, help="a task kind, or a JSON object {\"kind\", **block}")
    p.add_argument("--problems", required=True, help="JSONL of problems with an \"id\"")
    p.add_argument("--completions", required=True, help="JSONL of {\"id\", \"completion\"}")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)

    def score() -> None:
        rows = score_file(task_from_arg(args.task), args.problems, args.completions)
        if not rows:
            print(f"warning: {args.completions} holds no completions; nothing was scored", file=sys.stderr)
        sys.stdout.write(format_rows(rows))

    return run_stage("score_answers", score)


if __name__ == "__main__":
    raise SystemExit(main())
