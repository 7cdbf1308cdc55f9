r"""Score completions with a task's reward and print one row each: id, extracted answer, reward, reason.

    python -m scripts.score_answers --task countdown --problems data/tasks/<key>/test.jsonl \
        --completions answers.jsonl
    python -m scripts.score_answers --task '{"kind": "jsonl", "match": "numeric"}' --problems mine.jsonl \
        --completions answers.jsonl

--task: a kind (gsm8k, countdown, math, code, jsonl) with its defaults, or a JSON object of the kind and
its block's keys (config/schema.yaml definitions.task_<kind>). --problems: JSONL rows with "id" and the
task's fields (a frozen split has them). --completions: JSONL rows {"id", "completion"}.
A bad input (a bad row: "error: FILE:LINE: ...") exits 2; an empty completions file prints the header
and a warning. The library: randopt/tasks/score_answers.py.
"""
from __future__ import annotations

import argparse
import sys

from randopt.runtime.cli import run_stage
from randopt.tasks.score_answers import format_rows, score_file, task_from_arg


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m scripts.score_answers", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--task", required=True, help="a task kind, or a JSON object {\"kind\", **block}")
    parser.add_argument("--problems", required=True, help="JSONL of problems with an \"id\"")
    parser.add_argument("--completions", required=True, help="JSONL of {\"id\", \"completion\"}")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    def score() -> None:
        rows = score_file(task_from_arg(args.task), args.problems, args.completions)
        if not rows:
            print(f"warning: {args.completions} holds no completions; nothing was scored", file=sys.stderr)
        sys.stdout.write(format_rows(rows))

    return run_stage("score_answers", score)


if __name__ == "__main__":
    raise SystemExit(main())
