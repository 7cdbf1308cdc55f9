# Racing (selection.mode racing; docs/racing.md, randopt/selection/): every member answers a first slice
# of the train problems; after each round the members that can no longer reach the largest top-k stop,
# the others answer the next, larger slice. The rounds are known at DAG build (RACE_ROUNDS, each with
# RACE_CHUNKS race_slice jobs, rules/common.smk), so no checkpoint is needed: round r's jobs wait for
# round r-1's decision. Answers go through the answer cache that evaluate_shard uses too, so switching
# between full evaluation and racing evaluates no (seed, sigma, problem) twice.


# A round's decision is small: on a cluster it runs in the Snakemake process, as common.smk's localrules. Named
# here, where the rule exists: listed in common.smk, every run without racing warned that it was missing.
localrules:
    race_round,


def get_previous_survivors(wildcards):
    """Round 0 races the whole population; round r the survivors of round r-1."""
    r = int(wildcards.round)
    return [PLAN.race_survivors(r - 1)] if r > 0 else []


rule race_slice:
    input:
        model=f"{PATHS['model']}/manifest.json",
        train=f"{PATHS['problems']}/train.jsonl",
        survivors=get_previous_survivors,
    output:
        table=f"{PATHS['race']}/{RACE_CHUNK_STEM}.parquet",
        timings=f"{PATHS['race']}/{RACE_CHUNK_STEM}.timings.json",
    log:
        f"logs/race_slice/{KEYS['race']}/{RACE_CHUNK_STEM}.log",
    benchmark:
        f"{PATHS['benchmarks']}/race_slice/{KEYS['race']}/{RACE_CHUNK_STEM}.tsv"
    threads: job_threads()
    resources:
        **job_resources("evaluate_shard"),
    params:
        engine=engine_args(),
        decode=block(DECODE),
        plan=block(json.loads(PLAN.race.to_json())),
        round=lambda wc: int(wc.round),
        chunk=lambda wc: int(wc.chunk),
        survivors=lambda wc, input: f"--survivors {input.survivors}" if input.survivors else "",
        cache=PATHS["answer_cache"],
        code=key_code("eval"),
    # lint: PY comes from outside the rule on purpose (rules/common.smk says why).
    # lint: JOB_ENGINES comes from outside the rule on purpose (rules/common.smk says why).
    # lint: LOCAL_ENGINE comes from outside the rule on purpose (rules/common.smk says why).
    shell:
        "{PY} randopt.stages.race_slice {params.engine}{LOCAL_ENGINE}{JOB_ENGINES} --threads {threads} --decode-file {params.decode} --train {input.train}"
        " --plan-file {params.plan} --round {params.round} --chunk {params.chunk} {params.survivors}"
        " --cache-dir {params.cache} --out {output.table} --timings {output.timings} 2> {log}"


rule race_round:
    input:
        # this round's tables and every earlier round's: a decision reads all answers so far
        tables=lambda wc: [
            f"{PATHS['race']}/{stem}.parquet" for r in range(int(wc.round) + 1) for stem in PLAN.race_chunk_stems(r)
        ],
        survivors=get_previous_survivors,
    output:
        survivors=f"{PATHS['race']}/{RACE_SURVIVORS}",
    log:
        f"logs/race_round/{KEYS['race']}/round={{round}}.log",
    params:
        plan=block(json.loads(PLAN.race.to_json())),
        round=lambda wc: int(wc.round),
        survivors=lambda wc, input: f"--survivors-in {input.survivors}" if input.survivors else "",
    # lint: PY comes from outside the rule on purpose (rules/common.smk says why).
    shell:
        "{PY} randopt.stages.race_round --tables {input.tables} {params.survivors} --plan-file {params.plan}"
        " --round {params.round} --out {output.survivors} 2> {log}"
