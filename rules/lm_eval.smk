# lm-evaluation-harness on the run's base model and top-k ensembles (randopt/harness/, docs/lm_eval.md),
# after the record, on the tasks of config lm_eval.tasks; with none (the default) nothing asks for it.
# rule all asks for its table when tasks are set, and `snakemake --report` shows it beside the figures.
# Its outputs are under the run's eval and population keys and a key of the lm_eval block (lm_eval_dir,
# randopt/plan/run.py); its own code is a param (code_version), so an edit to the harness reruns it.


rule lm_eval:
    input:
        record=rules.record.output.record,
        ranking=PLAN.rounds.at(rules.rank.output.ranking, 1),
        model=f"{PATHS['model']}/model",
    output:
        results=f"{PLAN.lm_eval_dir}/lm_eval.json",
        table=report(f"{PLAN.lm_eval_dir}/lm_eval.tsv", caption="../report/lm_eval.rst", category="Benchmarks"),
    log:
        "logs/lm_eval.log",
    benchmark:
        f"{PATHS['benchmarks']}/{PLAN.lm_eval_dir.removeprefix('results/')}.tsv"
    threads: job_threads()
    resources:
        **job_resources("lm_eval"),
    params:
        models=" ".join(["--base"] + [f"--ensemble {f!r}" for f in CONFIG.lm_eval.ensembles]),
        lm_eval=PLAN.lm_eval_args(),
        code=code_version("lm_eval"),
    # lint: PY comes from outside the rule on purpose (rules/common.smk says why).
    shell:
        "{PY} randopt.stages.lm_eval --run-dir . --record {input.record} --ranking {input.ranking} --model-dir {input.model}"
        " {params.models} --threads {threads} --out {output.results} --table {output.table} {params.lm_eval}"
        " > {log} 2>&1"
