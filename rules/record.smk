# The record: everything above in the run's own folder (results/runs/<run key>/record.json: PLAN.run_dir), plus
# the run's one row in RECORDS.md (results/RECORDS.md by default); at the end of the run, after its figures, a
# copy of it at results/record.json, the default target, which names the last run (randopt/result/last_run.py).


rule record:
    input:
        # distill.enabled: each round's base, vote, bpb, datasets' manifest, and each arm's model manifest and
        # result (randopt/plan/run.py distill_round_files)
        **PLAN.distill_record_inputs(),
        # racing: a full evaluation's ranking of the same population, where one exists (randopt/plan/run.py)
        **PLAN.full_ranking_of_race(),
        model=rules.prepare_model.output.manifest,
        problems=rules.freeze_problems.output.manifest,
        heldout=rules.fetch_fineweb.output.manifest,
        # round 1's search and ensemble (a later round's are in its distill block)
        topk=PLAN.rounds.at(rules.rank.output.topk, 1),
        ranking=PLAN.rounds.at(rules.rank.output.ranking, 1),
        vote=PLAN.rounds.at(rules.vote.output.vote, 1),
        bpb=PLAN.rounds.at(rules.score_bpb.output.bpb, 1),
        shard_timings=PLAN.search_tables(".timings.json"),
        members_timings=PLAN.rounds.at(rules.evaluate_members.output.timings, 1),
        base_train=PLAN.rounds.at(rules.evaluate_members.output.base_train, 1),
        # every stage's Snakemake benchmark, whose times the record sums (rules/common.smk get_benchmarks)
        benchmarks=[pair.split("=", 1)[1] for pair in get_benchmarks()],
    output:
        record=f"{PLAN.run_dir}/record.json",
    log:
        f"logs/record/{PLAN.run_key}.log",
    params:
        config=block(PLAN.config),
        run_name=q(PLAN.run_name),
        run_key=PLAN.run_key,
        repo=q(workflow.basedir),
        benchmarks=" ".join(get_benchmarks()),
        records_md=q(CONFIG.records_md),
        # the record is under no content key: its own code reruns it (randopt/code_keys.py)
        code=code_version("record"),
        engines=block(ENGINES.layout.as_record() | ENGINES.mps.as_record(ENGINES.engines_per_gpu)),
        distill=lambda wildcards, input: (
            " ".join(
                "--distill-round " + " ".join(input[f"distill_round{r}"]) for r in range(1, len(PLAN.rounds.keys) + 1)
            )
            if PLAN.distill
            else ""
        ),
        # selection.mode auto: what it took and why (randopt/plan/selection.py; only then, so other runs' params stay)
        selection_auto=(f"--selection-auto-file {block(PLAN.selection.as_record())}" if PLAN.selection else ""),
        full_ranking=lambda wildcards, input: (
            f"--full-ranking {input.full_ranking} --full-topk {input.full_topk}"
            if "full_ranking" in input.keys()
            else ""
        ),
    # lint: PY comes from outside the rule on purpose (rules/common.smk says why).
    shell:
        "{PY} randopt.stages.record --config-file {params.config} --run-name {params.run_name} --run-key {params.run_key}"
        " --repo-dir {params.repo}"
        " --model-manifest {input.model} --problems-manifest {input.problems} --heldout-manifest {input.heldout}"
        " --topk {input.topk} --ranking {input.ranking} --vote {input.vote} --bpb {input.bpb}"
        " --shard-timings {input.shard_timings}"
        " --members-timings {input.members_timings} --base-train {input.base_train} --benchmarks {params.benchmarks}"
        " --records-md {params.records_md} --engines-file {params.engines} {params.distill} {params.full_ranking}"
        " {params.selection_auto} --out {output.record} 2> {log}"
