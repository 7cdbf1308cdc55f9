"""ask: a finished run's top-k ensemble answers new questions (majority answer and every member's),
through the run's own engine, prompt, decoding and task: its extraction, and its reward where a
question comes with its reference (randopt/result/finished_run.py). A tool, no rule of the workflow.
The run: --run (its folder or record), --configfile (the files it ran with), or by default the last finished
run (results/record.json; randopt/result/run_choice.py)."""
from __future__ import annotations

import json

from randopt.result.finished_run import ask, default_model_dir, read_questions
from randopt.result.run_choice import add_run_arguments, choose_run
from randopt.io import write_text_atomic
from randopt.runtime.cli import run_stage
from randopt.stages._args import stage_parser


def parse_args(argv=None):
    p = stage_parser("ask", __doc__)
    p.add_argument("questions", nargs="*", help="questions (or use --questions)")
    add_run_arguments(p)
    p.add_argument("--record", default=None, help="the run's record file (as --run RECORD)")
    p.add_argument("--fraction", type=float, required=True, help="which top-k list (a fraction in topk.fractions)")
    p.add_argument("--questions", dest="questions_file", help='JSONL, one object per line: {"question": ...}, '
                   'a frozen split\'s rows, or a task\'s problem fields (rendered by its template); '
                   'a row with an "answer" is rewarded by the task')
    p.add_argument("--model-dir", default=None, help="the run's prepared model dir (default: found from the record)")
    p.add_argument("--out", default=None, help="write one JSON line per question here")
    return p.parse_args(argv)


def reward_text(result: dict) -> str:
    if result["reward"] is None:
        return ""
    return f"  (reward {result['reward']:g}" + (f": {result['reason']})" if result.get("reason") else ")")


def main(argv=None) -> int:
    args = parse_args(argv)

    def body():
        questions = list(args.questions) + (read_questions(args.questions_file) if args.questions_file else [])
        record = choose_run(args.record or args.run, args.configfile, args.directory).record_path
        results = ask(record, args.fraction, questions, args.model_dir or default_model_dir(record))
        for r in results:
            print(f"Q: {r['question']}\nensemble: {r['answer']}{reward_text(r)}")
            for m in r["members"]:
                print(f"  #{m['rank']} seed {m['seed']} sigma {m['sigma']}: {m['answer']}{reward_text(m)}")
        if args.out:
            write_text_atomic(args.out, "".join(json.dumps(r) + "\n" for r in results))

    return run_stage("ask", body)


if __name__ == "__main__":
    raise SystemExit(main())
