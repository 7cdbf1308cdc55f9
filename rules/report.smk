# The report: figures of the run, declared with report() so that
#   snakemake --report results/report.html
# after a run embeds them with their captions (report/<name>.rst). rule all asks for them, so the
# default target (make record) draws them.

# Figure name (randopt/records/plots.py FIGURES) -> the report's category it is shown under.
FIGURE_CATEGORIES = {
    "train_reward_histogram": "Search",
    "train_reward_by_rank": "Search",
    "k_curve": "Ensemble",
    "train_vs_test": "Ensemble",
    "bits_per_byte": "Ensemble",
    "stage_times": "Run",
} | ({"distill": "Distillation"} if PLAN.distill else {})
FIGURES_DIR = f"{PLAN.run_dir}/figures"  # the run's own folder


rule figures:
    input:
        record=rules.record.output.record,
        ranking=PLAN.rounds.at(rules.rank.output.ranking, 1),
        vote=PLAN.rounds.at(rules.vote.output.vote, 1),
        # the captions, also beside the figures in the page below (an edited caption redraws it)
        captions=[os.path.join(workflow.basedir, "report", f"{name}.rst") for name in FIGURE_CATEGORIES],
    output:
        **{
            name: report(f"{FIGURES_DIR}/{name}.png", caption=f"../report/{name}.rst", category=category)
            for name, category in FIGURE_CATEGORIES.items()
        },
        page=f"{FIGURES_DIR}/figures.md",
    log:
        f"logs/figures/{PLAN.run_key}.log",
    params:
        # the folder of the declared outputs, taken from them (no second spelling of the path to drift)
        out_dir=lambda wildcards, output: os.path.dirname(output.k_curve),
        code=code_version("figures"),
    # lint: PY comes from outside the rule on purpose (rules/common.smk says why).
    shell:
        "{PY} randopt.stages.figures --record {input.record} --ranking {input.ranking} --vote {input.vote}"
        " --out-dir {params.out_dir} --captions {input.captions:q} --page {output.page} 2> {log}"
