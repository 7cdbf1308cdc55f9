# Data: the run's task's frozen splits (GSM8K's as any other task's: randopt/tasks/freeze.py) and the held-out
# text slice, each with a manifest of sha256s. A local source file's bytes are in the stage's key and checked
# again when the stage reads them (randopt/inputs.py).


rule freeze_problems:
    output:
        train=f"{PATHS['problems']}/train.jsonl",
        test=f"{PATHS['problems']}/test.jsonl",
        manifest=f"{PATHS['problems']}/manifest.json",
    log:
        "logs/freeze_problems.log",
    benchmark:
        f"{PATHS['benchmarks']}/freeze_problems/{KEYS['problems']}.tsv"
    params:
        # the task: its kind and block (GSM8K's: its selected source; randopt/config.py task_spec)
        task=block(PLAN.task_spec),
        n_train=PLAN.problems["n_train"],
        n_test=PLAN.problems["n_test"],
        selection_seed=PLAN.problems["selection_seed"],
        pins=" ".join(
            f"--pinned-{split}-sha256 {PLAN.problems[f'{split}_sha256']}"
            for split in ("train", "test")
            if PLAN.problems[f"{split}_sha256"]
        ),
        # a local source's sha256 at DAG build, which the key holds: other bytes are refused
        source_sha256=PLAN.source_sha256_arg("problems"),
        code=key_code("problems"),
    # lint: PY comes from outside the rule on purpose (rules/common.smk says why).
    shell:
        "{PY} randopt.stages.freeze_problems --task-file {params.task} --n-train {params.n_train}"
        " --n-test {params.n_test} --selection-seed {params.selection_seed} {params.pins} {params.source_sha256}"
        " --out-train {output.train} --out-test {output.test} --manifest {output.manifest} 2> {log}"


rule fetch_fineweb:
    output:
        text=f"{PATHS['heldout']}/heldout.jsonl",
        manifest=f"{PATHS['heldout']}/manifest.json",
    log:
        "logs/fetch_fineweb.log",
    benchmark:
        f"{PATHS['benchmarks']}/fetch_fineweb/{KEYS['heldout']}.tsv"
    params:
        source=block(PLAN.heldout_source),
        pin=f"--pinned-sha256 {CONFIG.heldout.sha256}" if CONFIG.heldout.sha256 else "",
        source_sha256=PLAN.source_sha256_arg("heldout"),
        code=key_code("heldout"),
    # lint: PY comes from outside the rule on purpose (rules/common.smk says why).
    shell:
        "{PY} randopt.stages.fetch_fineweb --source-file {params.source} {params.pin} {params.source_sha256}"
        " --out {output.text} --manifest {output.manifest} 2> {log}"
