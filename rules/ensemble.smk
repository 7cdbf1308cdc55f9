# The ensemble: top-k members (and the base model) answer the test split and vote (the base model
# also answers the train split, the reference for the members' train rewards; the controls' members and
# the base's other batch compositions answer the test split too, controls in config/schema.yaml); bits-per-byte of
# the base model and of each top-k ensemble on the held-out text. Per-member results are cached under
# content keys, so a new top-k fraction evaluates only members not seen before. Each distillation round
# (distill.rounds) has its own: {ekey} and {bkey} in a path are the round's eval and bpb keys (rules/common.smk).
# With several engine slots (engine.engines_per_gpu, --resources gpu=N), evaluate_members' work is first dealt
# over part jobs, one a slot, side by side like the search's shards (randopt/scoring/member_work.py); they fill
# the member cache and evaluate_members gathers it. With one slot there are no parts.


rule evaluate_members_part:
    input:
        model=round_path("model", "manifest.json"),
        test=f"{PATHS['problems']}/test.jsonl",
        train=f"{PATHS['problems']}/train.jsonl",
        topk=rules.rank.output.topk,
    output:
        part=f"{ROUND['members']}/{KEYS['population']}/parts/{{part}}of{PLAN.member_parts}.json",
    log:
        f"logs/evaluate_members_part/{{ekey}}/{{part}}of{PLAN.member_parts}.log",
    benchmark:
        f"{PATHS['benchmarks']}/evaluate_members_part/{{ekey}}/{KEYS['population']}/{{part}}of{PLAN.member_parts}.tsv"
    # ahead of score_bpb, which wants a slot at the same time: the parts start together, so they end together
    priority: 1
    threads: job_threads()
    resources:
        **job_resources("evaluate_members"),
    params:
        engine=round_engine_args(),
        decode=block(DECODE),
        cache=round_path("members", "cache"),
        base_compositions=CONFIG.controls.base_compositions,
        parts=PLAN.member_parts,
        code=key_code("eval"),
    # lint: PY comes from outside the rule on purpose (rules/common.smk says why).
    # lint: LOCAL_ENGINE comes from outside the rule on purpose (rules/common.smk says why).
    shell:
        "{PY} randopt.stages.evaluate_members_part {params.engine}{LOCAL_ENGINE} --threads {threads} --decode-file {params.decode}"
        " --test {input.test} --train {input.train} --topk {input.topk} --base-compositions {params.base_compositions}"
        " --cache-dir {params.cache} --part {wildcards.part} --parts {params.parts} --out {output.part} 2> {log}"


rule evaluate_members:
    input:
        model=round_path("model", "manifest.json"),
        test=f"{PATHS['problems']}/test.jsonl",
        train=f"{PATHS['problems']}/train.jsonl",
        topk=rules.rank.output.topk,
        # several engine slots: the part jobs that evaluated the work into the cache (none with one slot)
        parts=expand(rules.evaluate_members_part.output.part, part=PLAN.member_part_ids(), allow_missing=True),
    output:
        answers=f"{ROUND['members']}/{KEYS['population']}/answers.parquet",
        timings=f"{ROUND['members']}/{KEYS['population']}/timings.json",
        base_train=f"{ROUND['members']}/{KEYS['population']}/base_train.json",
        base_compositions=f"{ROUND['members']}/{KEYS['population']}/base_compositions.json",
    log:
        "logs/evaluate_members/{ekey}.log",
    benchmark:
        f"{PATHS['benchmarks']}/evaluate_members/{{ekey}}/{KEYS['population']}.tsv"
    threads: job_threads()
    resources:
        **job_resources("evaluate_members"),
    params:
        engine=round_engine_args(),
        decode=block(DECODE),
        cache=round_path("members", "cache"),
        base_compositions=CONFIG.controls.base_compositions,
        code=key_code("eval"),
        parts=lambda wildcards, input: f" --parts {' '.join(input.parts)}" if input.parts else "",
    # lint: PY comes from outside the rule on purpose (rules/common.smk says why).
    # lint: LOCAL_ENGINE comes from outside the rule on purpose (rules/common.smk says why).
    shell:
        "{PY} randopt.stages.evaluate_members {params.engine}{LOCAL_ENGINE} --threads {threads} --decode-file {params.decode} --test {input.test}"
        " --train {input.train} --base-train-out {output.base_train}"
        " --base-compositions {params.base_compositions} --base-compositions-out {output.base_compositions}"
        " --topk {input.topk} --cache-dir {params.cache} --out {output.answers} --timings {output.timings}{params.parts} 2> {log}"


# controls.self_consistency only: the base samples the test split K times a problem, from an engine of the job's own
# (as distillation's control samples: a resident engine cannot sample), and the vote votes SC@k from them.
rule self_consistency:
    input:
        model=round_path("model", "manifest.json"),
        test=f"{PATHS['problems']}/test.jsonl",
    output:
        samples=f"{ROUND['members']}/{KEYS['population']}/self_consistency/samples.parquet",
        summary=f"{ROUND['members']}/{KEYS['population']}/self_consistency/summary.json",
    log:
        "logs/self_consistency/{ekey}.log",
    benchmark:
        f"{PATHS['benchmarks']}/self_consistency/{{ekey}}/{KEYS['population']}.tsv"
    threads: job_threads()
    resources:
        **PLAN.distill_resources(),
    params:
        engine=round_engine_args(generating=False),
        decode=block(DECODE),
        sampling=block(PLAN.block_json("controls.self_consistency")),
        code=code_version("self_consistency"),
        # the finished pieces, beside the samples and under the sampling code's version (not the stage's command
        # line): a killed job resumes, and edited sampling code never reads an older code's pieces
        cache=lambda wildcards, output: f"{os.path.dirname(output.samples)}/pieces/{modules_version('randopt.distill.sampled_split')}",
    # lint: PY comes from outside the rule on purpose (rules/common.smk says why).
    # lint: DISTILL_LOCAL comes from outside the rule on purpose (as LOCAL_ENGINE: it changes no result).
    shell:
        "{PY} randopt.stages.self_consistency {params.engine}{DISTILL_LOCAL} --threads {threads} --decode-file {params.decode}"
        " --test {input.test} --sampling-file {params.sampling} --cache-dir {params.cache} --out {output.samples}"
        " --summary {output.summary} 2> {log}"


rule vote:
    input:
        answers=rules.evaluate_members.output.answers,
        base_compositions=rules.evaluate_members.output.base_compositions,
        topk=rules.rank.output.topk,
        test=f"{PATHS['problems']}/test.jsonl",
        sc=rules.self_consistency.output if PLAN.self_consistency else [],
    output:
        vote=f"{ROUND['vote']}/vote.json",
    log:
        "logs/vote/{ekey}.log",
    benchmark:
        f"{PATHS['benchmarks']}/vote/{{ekey}}/{KEYS['population']}.tsv"
    params:
        sc=lambda wildcards, input: f" --self-consistency {input.sc[0]} {input.sc[1]}" if input.sc else "",
    # lint: PY comes from outside the rule on purpose (rules/common.smk says why).
    shell:
        "{PY} randopt.stages.vote --answers {input.answers} --base-compositions {input.base_compositions}"
        " --topk {input.topk} --test {input.test}{params.sc}"
        " --out {output.vote} 2> {log}"


rule score_bpb:
    input:
        model=round_path("model", "manifest.json"),
        heldout=f"{PATHS['heldout']}/heldout.jsonl",
        topk=rules.rank.output.topk,
    output:
        bpb=f"{ROUND['bpb']}/{{ekey}}/{KEYS['population']}/bpb.json",
    log:
        "logs/score_bpb/{bkey}/{ekey}.log",
    benchmark:
        f"{PATHS['benchmarks']}/score_bpb/{{bkey}}/{{ekey}}/{KEYS['population']}.tsv"
    threads: job_threads()
    resources:
        **job_resources("score_bpb"),
    params:
        engine=round_engine_args(generating=False, **PLAN.bpb_engine_options()),
        max_context=CONFIG.heldout.max_context,
        cache=round_path("bpb", "cache"),
        code=key_code("bpb"),
    # lint: PY comes from outside the rule on purpose (rules/common.smk says why).
    # lint: LOCAL_ENGINE comes from outside the rule on purpose (rules/common.smk says why).
    shell:
        "{PY} randopt.stages.score_bpb {params.engine}{LOCAL_ENGINE} --threads {threads} --heldout {input.heldout} --topk {input.topk}"
        " --cache-dir {params.cache} --max-context {params.max_context} --out {output.bpb} 2> {log}"
