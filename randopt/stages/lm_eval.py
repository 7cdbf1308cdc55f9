"""lm_eval: a finished run's base model, members or top-k ensembles on any lm-evaluation-harness task,
through the "randopt" lm-eval model (randopt/harness/evaluate.py, docs/lm_eval.md). Arguments this parser
does not know are lm-eval's own (--tasks, --limit, --num_fewshot, --include_path, --gen_kwargs, ...).

  python -m randopt.stages.lm_eval --run-dir . --base --ensemble 0.1 --tasks randopt_arith,randopt_arith_choice --out lm_eval.json
"""
from __future__ import annotations

from randopt.harness.run import CHOICE_HELP
from randopt.result.run_choice import add_run_arguments, choose_run
from randopt.runtime.cli import run_stage
from randopt.stages._args import stage_parser


def parse_args(argv=None):
    """This stage's arguments, and the rest (lm-eval's own)."""
    p = stage_parser("lm_eval", __doc__, allow_abbrev=False)
    p.add_argument("--run-dir", default=".", help="the directory the workflow ran in (default: here)")
    models = p.add_argument_group("models (one or more, evaluated in this order on one engine)")
    models.add_argument("--base", dest="choices", action="append_const", const="base", help="the base model")
    models.add_argument("--member", dest="choices", action="append", type=lambda s: f"member:{s}",
                        metavar="SEED:SIGMA", help="one member (seed, sigma)")
    models.add_argument("--rank", dest="choices", action="append", type=lambda s: f"rank:{s}", metavar="N",
                        help="the member at rank N (1 = best) of the run's ranking")
    models.add_argument("--ensemble", dest="choices", action="append", type=lambda s: f"ensemble:{s}",
                        metavar="F|K", help="the top-k ensemble: a fraction of the population, or K members")
    models.add_argument("--model-choice", dest="choices", action="append", metavar="CHOICE", help=CHOICE_HELP)
    p.add_argument("--out", required=True, help="the results JSON (lm-eval's results per model, with a header)")
    p.add_argument("--table", help="also write every model's metrics side by side here (TSV)")
    add_run_arguments(p, directory_flag=None)
    p.add_argument("--record", help="the run's record (default: the run --run or --configfile names, else the last "
                                    "finished run, RUN_DIR/results/record.json)")
    p.add_argument("--ranking", help="the run's ranking.parquet (default: where the workflow put it)")
    p.add_argument("--model-dir", help="the run's prepared model dir (default: where the workflow put it)")
    p.add_argument("--threads", type=int, help="CPU threads of the torch engine")
    return p.parse_known_args(argv)


def main(argv=None) -> int:
    args, lm_eval_argv = parse_args(argv)

    def body():
        from randopt.harness.evaluate import evaluate
        run_dir, record = args.run_dir, args.record
        if args.run or args.configfile:  # a run named: its record, and the directory it ran in
            chosen = choose_run(args.run, args.configfile, args.run_dir)
            run_dir, record = chosen.workdir, chosen.record_path
        evaluate(run_dir, args.choices, lm_eval_argv, args.out, table=args.table, record=record,
                 ranking=args.ranking, model_dir=args.model_dir, threads=args.threads)

    return run_stage("lm_eval", body)


if __name__ == "__main__":
    raise SystemExit(main())
