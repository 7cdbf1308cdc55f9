# randopt: the RandOpt speedrun as cached, content-addressed stages.
#
#   snakemake --cores all                          (the record and the report's figures)
#   snakemake --report results/report.html         (after a run: the figures with their captions)
#
# The run, in order: freeze the GSM8K splits and the held-out text; prepare the model; score every
# (seed, sigma) of the population on the train split, shard by shard (or in racing rounds); rank; let the top-k members
# answer the test split and vote; score bits-per-byte of the base model and the top-k ensembles;
# write the record (with its statistics: randopt/report/statistics.py) and draw the report's figures.
# Output paths carry content keys (randopt/keys.py), so finished work is reused.
# Inputs (frozen data, prepared models) go to data/, what the search computes to results/.
#
# Where each stage's code is (rule -> its CLI -> the library function it calls):
#   freeze_gsm8k, fetch_fineweb   rules/data.smk      scripts/<stage>.py  randopt/data/gsm8k.py, heldout.py
#   prepare_model                 rules/model.smk     scripts/<stage>.py  randopt/stages/prepare_model.py
#   evaluate_shard, rank          rules/search.smk    scripts/<stage>.py  randopt/stages/<stage>.py
#   race_slice, race_round        rules/racing.smk    scripts/<stage>.py  randopt/stages/<stage>.py
#     (selection.mode racing: the search in rounds that stop hopeless members early; docs/racing.md)
#   evaluate_members, vote,       rules/ensemble.smk  scripts/<stage>.py  randopt/stages/<stage>.py
#   score_bpb
#   record                        rules/record.smk    scripts/<stage>.py  randopt/stages/record.py
#   export (a member as a model)  rules/export.smk    scripts/export_member.py  randopt/model/export.py
#   figures                       rules/report.smk    scripts/<stage>.py  randopt/stages/figures.py
# The engines (randopt/engines/) perturb weights through randopt/engines/perturb.py and kernels/.
#
# snakemake --lint (tests/test_lint.py runs it): three lints remain, each justified where it stands.
#   lint: no rule has a conda: environment or container. The software is pinned in envs/ and installed
#   once (make env; docs/gpu.md for vLLM); no conda channel is reachable where this is built and tested,
#   so a conda: directive could be neither resolved nor tested here.
#   lint: LOCAL_ENGINE in the engine stages' commands (rules/common.smk says why).
#   lint: PY in every stage's command (rules/common.smk says why).
import os

from snakemake.utils import min_version

min_version("9.0")


# The embedded default; --configfile files given on the command line are merged over it.
configfile: os.path.join(workflow.basedir, "config", "config.yaml")


include: "rules/common.smk"


rule all:
    input:
        "results/record.json",
        # the report's figures (rules/report.smk, included below; a function, so it is read then)
        lambda wildcards: rules.figures.output,
    default_target: True


include: "rules/data.smk"
include: "rules/model.smk"
include: "rules/search.smk"
if RACING:  # selection.mode racing: the search's rounds (the rank rule reads their tables)

    include: "rules/racing.smk"
include: "rules/ensemble.smk"
include: "rules/record.smk"
include: "rules/export.smk"
include: "rules/report.smk"


# Resident engines (engine.keep_loaded_s; randopt/runtime/resident.py) serve the engine jobs of this run only:
# stop them when it ends, however it ends (a killed run's exit after keep_loaded_s idle seconds).
onsuccess:
    stop_resident_engines()


onerror:
    stop_resident_engines()
