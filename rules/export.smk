# Using the result: a member of the ranking as a Hugging Face model dir (randopt/result/export.py).
#   snakemake --cores all export                    the ranks in config export.ranks (default: the best)
#   snakemake --cores all results/export/<eval key>/<population key>/rank3/randopt_member.json    any rank
#                                                   (-n prints the keys)
# The rule's output is the member's description file inside the model dir, not the dir: a directory() output
# gets Snakemake's .snakemake_timestamp inside it, a stray file in a folder a user copies as a model. The
# stage writes the whole dir at once (randopt/io.py atomic_path), so the file is there only with the model.


rule export:
    input:
        [f"{PATHS['export']}/rank{r}/{MEMBER_FILE}" for r in CONFIG.export.ranks],


rule export_member:
    input:
        model=f"{PATHS['model']}/model",
        ranking=f"{PATHS['rank']}/ranking.parquet",
    output:
        member=f"{PATHS['export']}/rank{{rank}}/{MEMBER_FILE}",
    log:
        f"logs/export_member/{KEYS['eval']}/{KEYS['population']}/rank{{rank}}.log",
    wildcard_constraints:
        rank=r"[1-9][0-9]*",
    params:
        code=code_version("export_member"),
        noise=CONFIG.perturbation.noise,
        folder=lambda wildcards, output: os.path.dirname(output.member),
    # lint: PY comes from outside the rule on purpose (rules/common.smk says why).
    shell:
        "{PY} randopt.stages.export_member --model-dir {input.model} --ranking {input.ranking} --rank {wildcards.rank}"
        " --noise {params.noise} --out {params.folder} > {log} 2>&1"
