# The ensemble: top-k members (and the base model) answer the test split and vote (the base model
# also answers the train split, the reference for the members' train rewards); bits-per-byte of
# the base model and of each top-k ensemble on the held-out text. Per-member results are cached under
# content keys, so a new top-k fraction evaluates only members not seen before.


rule evaluate_members:
    input:
        model=f"{MODEL}/manifest.json",
        test=f"{DATA_PROBLEMS}/test.jsonl",
        train=f"{DATA_PROBLEMS}/train.jsonl",
        topk=f"{RANK}/topk.json",
    output:
        answers=f"{MEMBERS}/{KEYS['population']}/answers.parquet",
        timings=f"{MEMBERS}/{KEYS['population']}/timings.json",
        base_train=f"{MEMBERS}/{KEYS['population']}/base_train.json",
    params:
        engine=get_generating_engine_args(),
        decode=q_text(DECODE),
        cache=f"{MEMBERS}/cache",
        code=key_code("eval"),
    threads: job_threads()
    resources:
        **job_resources("evaluate_members"),
    log:
        "logs/evaluate_members.log",
    benchmark:
        f"{BENCH}/evaluate_members/{KEYS['eval']}/{KEYS['population']}.tsv"
    # lint: PY comes from outside the rule on purpose (rules/common.smk says why).
    # lint: LOCAL_ENGINE comes from outside the rule on purpose (rules/common.smk says why).
    shell:
        "{PY} scripts.evaluate_members {params.engine}{LOCAL_ENGINE} --threads {threads} --decode {params.decode} --test {input.test}"
        " --train {input.train} --base-train-out {output.base_train}"
        " --topk {input.topk} --cache-dir {params.cache} --out {output.answers} --timings {output.timings} 2> {log}"


rule vote:
    input:
        answers=rules.evaluate_members.output.answers,
        topk=f"{RANK}/topk.json",
        test=f"{DATA_PROBLEMS}/test.jsonl",
    output:
        vote=f"{VOTE}/vote.json",
    log:
        "logs/vote.log",
    benchmark:
        f"{BENCH}/vote/{KEYS['eval']}/{KEYS['population']}.tsv"
    # lint: PY comes from outside the rule on purpose (rules/common.smk says why).
    shell:
        "{PY} scripts.vote --answers {input.answers} --topk {input.topk} --test {input.test}"
        " --out {output.vote} 2> {log}"


rule score_bpb:
    input:
        model=f"{MODEL}/manifest.json",
        heldout=f"{DATA_HELDOUT}/heldout.jsonl",
        topk=f"{RANK}/topk.json",
    output:
        bpb=f"{BPB}/{KEYS['eval']}/{KEYS['population']}/bpb.json",
    params:
        engine=get_engine_args(max_context=config["heldout"]["max_context"]),
        cache=f"{BPB}/cache",
        code=key_code("bpb"),
    threads: job_threads()
    resources:
        **job_resources("score_bpb"),
    log:
        "logs/score_bpb.log",
    benchmark:
        f"{BENCH}/score_bpb/{KEYS['bpb']}/{KEYS['eval']}/{KEYS['population']}.tsv"
    # lint: PY comes from outside the rule on purpose (rules/common.smk says why).
    # lint: LOCAL_ENGINE comes from outside the rule on purpose (rules/common.smk says why).
    shell:
        "{PY} scripts.score_bpb {params.engine}{LOCAL_ENGINE} --threads {threads} --heldout {input.heldout} --topk {input.topk}"
        " --cache-dir {params.cache} --out {output.bpb} 2> {log}"
