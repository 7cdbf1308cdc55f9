# Data: the task's frozen splits (GSM8K's by freeze_gsm8k, any other task's by freeze_task) and the
# held-out text slice, each with a manifest of sha256s. A local source file's bytes are in the stage's key
# and checked again when the stage reads them (randopt/inputs.py). Both freeze rules are defined in every run; the
# one of the other kind writes under an "unused" path that nothing asks for (rules/common.smk).


rule freeze_gsm8k:
    output:
        train=f"{DATA_GSM8K}/train.jsonl",
        test=f"{DATA_GSM8K}/test.jsonl",
        manifest=f"{DATA_GSM8K}/manifest.json",
    log:
        "logs/freeze_gsm8k.log",
    benchmark:
        f"{PATHS['benchmarks']}/freeze_gsm8k/{KEYS.get('gsm8k', 'unused')}.tsv"
    params:
        source=q(gsm8k_source(config)),
        n_train=PLAN.problems["n_train"],
        n_test=PLAN.problems["n_test"],
        selection_seed=PLAN.problems["selection_seed"],
        pins=" ".join(
            f"--pinned-{split}-sha256 {PLAN.problems[f'{split}_sha256']}"
            for split in ("train", "test")
            if PLAN.problems[f"{split}_sha256"]
        ),
        # a jsonl source's sha256 at DAG build, which the key holds: other bytes are refused
        source_sha256=PLAN.source_sha256_arg("problems"),
        code=key_code("gsm8k"),
    # lint: PY comes from outside the rule on purpose (rules/common.smk says why).
    shell:
        "{PY} randopt.stages.freeze_gsm8k --source-json {params.source} --n-train {params.n_train}"
        " --n-test {params.n_test} --selection-seed {params.selection_seed} {params.pins} {params.source_sha256}"
        " --out-train {output.train} --out-test {output.test} --manifest {output.manifest} 2> {log}"


rule freeze_task:
    output:
        train=f"{DATA_TASK}/train.jsonl",
        test=f"{DATA_TASK}/test.jsonl",
        manifest=f"{DATA_TASK}/manifest.json",
    log:
        "logs/freeze_task.log",
    benchmark:
        f"{PATHS['benchmarks']}/freeze_task/{KEYS.get('task', 'unused')}.tsv"
    params:
        task=q_text(task_spec(config)),
        n_train=PLAN.problems["n_train"],
        n_test=PLAN.problems["n_test"],
        selection_seed=PLAN.problems["selection_seed"],
        pins=" ".join(
            f"--pinned-{split}-sha256 {PLAN.problems[f'{split}_sha256']}"
            for split in ("train", "test")
            if PLAN.problems[f"{split}_sha256"]
        ),
        source_sha256=PLAN.source_sha256_arg("problems"),
        code=key_code("task"),
    # lint: PY comes from outside the rule on purpose (rules/common.smk says why).
    shell:
        "{PY} randopt.stages.freeze_task --task-json {params.task} --n-train {params.n_train}"
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
        source=q(heldout_source(config)),
        pin=f"--pinned-sha256 {config['heldout']['sha256']}" if config["heldout"]["sha256"] else "",
        source_sha256=PLAN.source_sha256_arg("heldout"),
        code=key_code("heldout"),
    # lint: PY comes from outside the rule on purpose (rules/common.smk says why).
    shell:
        "{PY} randopt.stages.fetch_fineweb --source-json {params.source} {params.pin} {params.source_sha256}"
        " --out {output.text} --manifest {output.manifest} 2> {log}"
