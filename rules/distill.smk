# Distillation (distill.enabled; docs/distill.md): the distilled top-k list's correct train completions
# fine-tune a LoRA of the base (the distilled model); the base model's own correct samples, resampled to
# the same size, fine-tune another (the control). Both merged models answer the test split and score bpb
# as the base does, and the record compares them with the base and the ensemble. Included by the
# Snakefile only when enabled, so a run without it has the rules, keys and paths it always had.
# Its folders, knobs and the DAG-build check of the LoRA targets: rules/common.smk (DISTILL_*).

wildcard_constraints:
    arm="distilled|control",


rule distill_data:
    input:
        model=f"{MODEL}/manifest.json",
        train=f"{DATA_PROBLEMS}/train.jsonl",
        topk=f"{RANK}/topk.json",
    output:
        distilled=f"{DISTILL_DATA}/distilled.jsonl",
        control=f"{DISTILL_DATA}/control.jsonl",
        manifest=f"{DISTILL_DATA}/manifest.json",
    params:
        engine=get_engine_args(),
        decode=q_text(DECODE),
        cache=ANSWER_CACHE,
        fraction=DISTILL_FRACTION,
        per_problem=DISTILL["per_problem"],
        control=q(DISTILL["control"]),
        round=DISTILL_ROUND,
        code=key_code("distill_data"),
    threads: job_threads()
    resources:
        **job_resources("evaluate_members"),
    log:
        "logs/distill_data.log",
    benchmark:
        f"{BENCH}/distill_data/{KEYS['distill_data']}.tsv"
    # lint: PY comes from outside the rule on purpose (rules/common.smk says why).
    shell:
        "{PY} scripts.distill_data {params.engine} --threads {threads} --decode {params.decode} --train {input.train}"
        " --topk {input.topk} --fraction {params.fraction} --cache-dir {params.cache} --per-problem {params.per_problem}"
        " --control {params.control} --round {params.round} --out-distilled {output.distilled}"
        " --out-control {output.control} --manifest {output.manifest} 2> {log}"


rule distill_train:
    input:
        base=f"{MODEL}/model",
        base_manifest=f"{MODEL}/manifest.json",
        data=f"{DISTILL_DATA}/{{arm}}.jsonl",
        data_manifest=rules.distill_data.output.manifest,
    output:
        model=directory(f"{DISTILL_TRAIN}/{{arm}}/model"),
        adapter=directory(f"{DISTILL_TRAIN}/{{arm}}/adapter"),
        manifest=f"{DISTILL_TRAIN}/{{arm}}/manifest.json",
    params:
        lora=q(DISTILL["lora"]),
        train=q(DISTILL["train"]),
        device=config["engine"]["device"],
        trust="--trust-remote-code" if config["model"]["trust_remote_code"] else "",
        # the engine's resolved dtype (in the eval key, so in this one): bfloat16 trains under bf16 autocast
        compute_dtype=COMPUTE_DTYPE,
        round=DISTILL_ROUND,
        code=key_code("distill_train"),
    threads: job_threads(gpu_stage=False)
    resources:
        **job_resources("evaluate_members"),
    log:
        "logs/distill_train/{arm}.log",
    benchmark:
        f"{BENCH}/distill_train/{KEYS['distill_train']}/{{arm}}.tsv"
    # lint: PY comes from outside the rule on purpose (rules/common.smk says why).
    shell:
        "{PY} scripts.distill_train --base-dir {input.base} --base-manifest {input.base_manifest} --data {input.data}"
        " --arm {wildcards.arm} --round {params.round} --lora {params.lora} --train {params.train}"
        " --device {params.device} --threads {threads} {params.trust} --compute-dtype {params.compute_dtype}"
        " --out-model {output.model}"
        " --out-adapter {output.adapter} --manifest {output.manifest} 2> {log}"


rule evaluate_distilled:
    input:
        model=rules.distill_train.output.model,
        model_manifest=rules.distill_train.output.manifest,
        test=f"{DATA_PROBLEMS}/test.jsonl",
        heldout=f"{DATA_HELDOUT}/heldout.jsonl",
    output:
        answers=f"{DISTILL_EVAL}/{{arm}}/answers.parquet",
        result=f"{DISTILL_EVAL}/{{arm}}/result.json",
    params:
        # the base's engine options and the bpb window, on the fine-tuned model dir
        engine=lambda wildcards: get_engine_args(f"{DISTILL_TRAIN}/{wildcards.arm}/model",
                                                 max_context=config["heldout"]["max_context"]),
        decode=q_text(DECODE),
        code=key_code("distill_eval"),
    threads: job_threads()
    resources:
        **job_resources("evaluate_members"),
    log:
        "logs/evaluate_distilled/{arm}.log",
    benchmark:
        f"{BENCH}/evaluate_distilled/{KEYS['distill_eval']}/{{arm}}.tsv"
    # lint: PY comes from outside the rule on purpose (rules/common.smk says why).
    shell:
        "{PY} scripts.evaluate_distilled {params.engine} --threads {threads} --decode {params.decode}"
        " --model-manifest {input.model_manifest} --arm {wildcards.arm} --test {input.test} --heldout {input.heldout}"
        " --out-answers {output.answers} --out {output.result} 2> {log}"
