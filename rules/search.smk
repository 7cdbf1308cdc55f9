# The search: every (seed, sigma) scored on the train split, shard by shard (selection.mode full), or
# in racing rounds (selection.mode racing: rules/racing.smk), then ranked. Each distillation round
# (distill.rounds) searches on its own base model: {ekey} in a path is the round's eval key (rules/common.smk).


rule evaluate_shard:
    input:
        model=round_path("model", "manifest.json"),
        train=f"{PATHS['problems']}/train.jsonl",
    output:
        table=f"{ROUND['shards']}/{SHARD_STEM}.parquet",
        timings=f"{ROUND['shards']}/{SHARD_STEM}.timings.json",
    log:
        f"logs/evaluate_shard/{{ekey}}/{SHARD_STEM}.log",
    benchmark:
        f"{PATHS['benchmarks']}/evaluate_shard/{{ekey}}/{SHARD_STEM}.tsv"
    threads: job_threads()
    resources:
        **job_resources("evaluate_shard"),
    params:
        engine=round_engine_args(),
        decode=block(DECODE),
        first=lambda wc: int(wc.first),
        last=lambda wc: int(wc.last),
        cache=round_path("answer_cache"),
        # absent: one answer block (randopt/scoring/answer_blocks.py)
        batch_size=f"--batch-size {PLAN.answer_block}" if PLAN.answer_block else "",
        order_seed=CONFIG.selection.order_seed,
        # absent: one seed at a time (engine.member_batch 1)
        member_batch=(f"--member-batch {CONFIG.engine.member_batch}" if CONFIG.engine.member_batch > 1 else ""),
        code=key_code("eval"),
    # lint: PY comes from outside the rule on purpose (rules/common.smk says why).
    # lint: JOB_ENGINES comes from outside the rule on purpose (rules/common.smk says why).
    # lint: LOCAL_ENGINE comes from outside the rule on purpose (rules/common.smk says why: in params, a run
    # with --resources gpu=N, or another engine.keep_loaded_s, would rerun every job another run had finished).
    shell:
        "{PY} randopt.stages.evaluate_shard {params.engine}{LOCAL_ENGINE}{JOB_ENGINES} --threads {threads} --decode-file {params.decode} --train {input.train}"
        " --sigma {wildcards.sigma} --first-seed {params.first} --last-seed {params.last}"
        " {params.batch_size} --order-seed {params.order_seed} {params.member_batch}"
        " --cache-dir {params.cache} --out {output.table} --timings {output.timings} 2> {log}"


rule rank:
    input:
        shards=lambda wildcards: PLAN.search_tables(r=round_of(wildcards)),
        rounds=PLAN.race_rounds(),
    output:
        ranking=f"{ROUND['rank']}/ranking.parquet",
        topk=f"{ROUND['rank']}/topk.json",
    log:
        "logs/rank/{ekey}.log",
    benchmark:
        f"{PATHS['benchmarks']}/rank/{{ekey}}/{KEYS['population']}.tsv"
    params:
        n_seeds=CONFIG.population.n_seeds,
        sigmas=" ".join(map(sigma_label, CONFIG.population.sigmas)),
        fractions=" ".join(map(repr, CONFIG.topk.fractions)),
        n_train=PLAN.problems["n_train"],
        # full evaluation: only the mode, so that racing knobs left in a config rerun nothing
        selection=block(PLAN.block_json("selection") if PLAN.racing else {"mode": "full"}),
        random_vote=" ".join(map(repr, CONFIG.controls.random_vote)),
        random_members=CONFIG.controls.random_members,
    # lint: PY comes from outside the rule on purpose (rules/common.smk says why).
    shell:
        "{PY} randopt.stages.rank --shards {input.shards} --n-seeds {params.n_seeds} --sigmas {params.sigmas}"
        " --fractions {params.fractions} --random-vote {params.random_vote} --random-members {params.random_members} --n-train {params.n_train} --selection-file {params.selection}"
        " --rounds {input.rounds} --ranking {output.ranking} --topk {output.topk} 2> {log}"
