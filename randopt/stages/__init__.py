"""One module per stage, each a command: `python -m randopt.stages.<stage>` (rules/*.smk runs it). Its
main() parses the arguments (the ones several stages share: _args.py) and its run() reads, computes and
writes the stage's outputs. A stage whose work is a library function has main() alone, calling it
(freeze_problems, fetch_fineweb, export_member and lm_eval; ask and score_answers are tools no
rule runs). The Snakefile's header maps every rule to its module.
"""
