# Using the result: a member of the ranking as a Hugging Face model dir (randopt/result/export.py).
#   snakemake --cores all export                    the ranks in config export.ranks (default: the best)
#   snakemake --cores all results/export/<eval key>/<population key>/rank3    any rank (-n prints the keys)


rule export:
    input:
        [f"{PATHS['export']}/rank{r}" for r in CONFIG.export.ranks],


rule export_member:
    input:
        model=f"{PATHS['model']}/model",
        ranking=f"{PATHS['rank']}/ranking.parquet",
    output:
        member=directory(f"{PATHS['export']}/rank{{rank}}"),
    log:
        f"logs/export_member/{KEYS['eval']}/{KEYS['population']}/rank{{rank}}.log",
    wildcard_constraints:
        rank=r"[1-9][0-9]*",
    params:
        code=code_version("export_member"),
        noise=CONFIG.perturbation.noise,
    # lint: PY comes from outside the rule on purpose (rules/common.smk says why).
    shell:
        "{PY} randopt.stages.export_member --model-dir {input.model} --ranking {input.ranking} --rank {wildcards.rank}"
        " --noise {params.noise} --out {output.member} > {log} 2>&1"
