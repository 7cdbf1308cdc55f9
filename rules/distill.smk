# Distillation (distill.enabled; docs/distill.md): the distilled top-k list's correct train completions
# fine-tune a LoRA of the base (the distilled model); the base model's own correct samples, resampled to
# the same size, fine-tune another (the control). Both merged models answer the test split and score bpb
# as the base does, and the record compares them with the base and the ensemble. Included by the
# Snakefile only when enabled, so a run without it has the rules, keys and paths it always had.
# The LoRA targets are checked at DAG build (randopt/plan/run.py). Every round (distill.rounds) has its own
# jobs: {ekey}, {dkey}, {tkey}, {vkey} in a path are the round's keys, and round_knobs (randopt/config.py) its
# knobs; round r+1's base model is this rule's distilled model (rule round_base, rules/model.smk).
wildcard_constraints:
    arm="distilled|control",


rule distill_data:
    input:
        model=round_path("model", "manifest.json"),
        train=f"{PATHS['problems']}/train.jsonl",
        topk=rules.rank.output.topk,
    output:
        distilled=f"{ROUND['distill_data']}/distilled.jsonl",
        control=f"{ROUND['distill_data']}/control.jsonl",
        manifest=f"{ROUND['distill_data']}/manifest.json",
    log:
        "logs/distill_data/{ekey}/{dkey}.log",
    benchmark:
        f"{PATHS['benchmarks']}/distill_data/{{ekey}}/{{dkey}}.tsv"
    threads: job_threads()
    resources:
        **PLAN.distill_resources(),
    params:
        engine=round_engine_args(generating=False),
        decode=block(DECODE),
        cache=round_path("answer_cache"),
        fraction=distill_knob("fraction"),
        per_problem=distill_knob("per_problem"),
        control=distill_knob("control"),
        round=round_of,
        code=key_code("distill_data"),
    # lint: PY comes from outside the rule on purpose (rules/common.smk says why).
    # lint: DISTILL_LOCAL comes from outside the rule on purpose (as LOCAL_ENGINE: it changes no result).
    shell:
        "{PY} randopt.stages.distill_data {params.engine}{DISTILL_LOCAL} --threads {threads} --decode-file {params.decode} --train {input.train}"
        " --topk {input.topk} --fraction {params.fraction} --cache-dir {params.cache} --per-problem {params.per_problem}"
        " --control-file {params.control} --round {params.round} --out-distilled {output.distilled}"
        " --out-control {output.control} --manifest {output.manifest} 2> {log}"


rule distill_train:
    input:
        base=round_path("model", "model"),
        base_manifest=round_path("model", "manifest.json"),
        data=f"{ROUND['distill_data']}/{{arm}}.jsonl",
        data_manifest=rules.distill_data.output.manifest,
    output:
        model=directory(f"{ROUND['distill_train']}/{{arm}}/model"),
        adapter=directory(f"{ROUND['distill_train']}/{{arm}}/adapter"),
        manifest=f"{ROUND['distill_train']}/{{arm}}/manifest.json",
    log:
        "logs/distill_train/{ekey}/{dkey}/{tkey}/{arm}.log",
    benchmark:
        f"{PATHS['benchmarks']}/distill_train/{{ekey}}/{{dkey}}/{{tkey}}/{{arm}}.tsv"
    threads: job_threads(gpu_stage=False)
    resources:
        **PLAN.distill_resources(),
    params:
        lora=distill_knob("lora"),
        train=distill_knob("train"),
        device=PLAN.distill_device,
        trust_remote_code="--trust-remote-code" if CONFIG.model.trust_remote_code else "",
        # the engine's resolved dtype (in the eval key, so in this one): bfloat16 trains under bf16 autocast
        compute_dtype=PLAN.compute_dtype,
        round=round_of,
        code=key_code("distill_train"),
    # lint: PY comes from outside the rule on purpose (rules/common.smk says why).
    # lint: DISTILL_LOCAL comes from outside the rule on purpose (as LOCAL_ENGINE: it changes no result).
    shell:
        "{PY} randopt.stages.distill_train --base-dir {input.base} --base-manifest {input.base_manifest} --data {input.data}"
        " --arm {wildcards.arm} --round {params.round} --lora-file {params.lora} --train-file {params.train}"
        " --device {params.device}{DISTILL_LOCAL} --threads {threads} {params.trust_remote_code} --compute-dtype {params.compute_dtype}"
        " --out-model {output.model}"
        " --out-adapter {output.adapter} --manifest {output.manifest} 2> {log}"


rule evaluate_distilled:
    input:
        model=rules.distill_train.output.model,
        model_manifest=rules.distill_train.output.manifest,
        test=f"{PATHS['problems']}/test.jsonl",
        heldout=f"{PATHS['heldout']}/heldout.jsonl",
    output:
        answers=f"{ROUND['distill_eval']}/{{arm}}/answers.parquet",
        result=f"{ROUND['distill_eval']}/{{arm}}/result.json",
    log:
        "logs/evaluate_distilled/{ekey}/{dkey}/{tkey}/{vkey}/{arm}.log",
    benchmark:
        f"{PATHS['benchmarks']}/evaluate_distilled/{{ekey}}/{{dkey}}/{{tkey}}/{{vkey}}/{{arm}}.tsv"
    threads: job_threads()
    resources:
        **PLAN.distill_resources(),
    params:
        # the base's engine options and the bpb window, on the fine-tuned model dir
        engine=lambda wildcards, input: engine_args(
            input.model, generating=False, max_context=CONFIG.heldout.max_context
        ),
        decode=block(DECODE),
        code=key_code("distill_eval"),
    # lint: PY comes from outside the rule on purpose (rules/common.smk says why).
    # lint: DISTILL_LOCAL comes from outside the rule on purpose (as LOCAL_ENGINE: it changes no result).
    shell:
        "{PY} randopt.stages.evaluate_distilled {params.engine}{DISTILL_LOCAL} --threads {threads} --decode-file {params.decode}"
        " --model-manifest {input.model_manifest} --arm {wildcards.arm} --test {input.test} --heldout {input.heldout}"
        " --out-answers {output.answers} --out {output.result} 2> {log}"
