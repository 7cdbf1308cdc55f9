# randopt: the RandOpt speedrun as cached, content-addressed stages.
#
#   snakemake --cores all                          (the record and the report's figures)
#   snakemake --report results/report.html         (after a run: the figures with their captions)
#
# The run, in order: freeze the task's splits (GSM8K by default; randopt/tasks/) and the held-out text; prepare the model; score every
# (seed, sigma) of the population on the train split, shard by shard (or in racing rounds); rank; let the top-k members
# answer the test split (over every engine slot, in parts) and vote; score bits-per-byte of the base model and the top-k ensembles;
# write the record (with its statistics: randopt/records/statistics.py) and draw the report's figures.
# Output paths carry content keys (randopt/keys.py), so finished work is reused.
# Inputs (frozen data, prepared models) go to data/, what the search computes to results/.
#
# Where each stage's code is: the rule (in rules/<file>) runs python -m randopt.stages.<stage>, whose main()
# parses the arguments and whose run() does the work, or calls the library module named (tests/test_docs.py
# checks this table against the code):
#   freeze_problems   data.smk      randopt/tasks/freeze.py (write_frozen; every task, GSM8K the default: docs/tasks.md)
#   fetch_fineweb     data.smk      randopt/data/heldout.py (write_heldout)
#   prepare_model     model.smk     randopt/stages/prepare_model.py
#   round_base        model.smk     randopt/stages/prepare_model.py (distill.rounds > 1: round r's base, round r-1's distilled model)
#   evaluate_shard    search.smk    randopt/stages/evaluate_shard.py
#   rank              search.smk    randopt/stages/rank.py
#   race_slice        racing.smk    randopt/stages/race_slice.py (selection.mode racing: docs/racing.md)
#   race_round        racing.smk    randopt/stages/race_round.py
#   evaluate_members_part ensemble.smk randopt/stages/evaluate_members_part.py (several engine slots: a share each)
#   evaluate_members  ensemble.smk  randopt/stages/evaluate_members.py
#   self_consistency  ensemble.smk  randopt/stages/self_consistency.py (controls.self_consistency: the base's samples)
#   vote              ensemble.smk  randopt/stages/vote.py
#   score_bpb         ensemble.smk  randopt/stages/score_bpb.py
#   record            record.smk    randopt/stages/record.py
#   figures           report.smk    randopt/stages/figures.py
#   export_member     export.smk    randopt/result/export.py (export_rank; rule export asks for config export.ranks)
#   distill_data      distill.smk   randopt/stages/distill_data.py (distill.enabled: docs/distill.md)
#   distill_train     distill.smk   randopt/stages/distill_train.py
#   evaluate_distilled distill.smk  randopt/stages/evaluate_distilled.py
#   lm_eval           lm_eval.smk   randopt/harness/evaluate.py (config lm_eval.tasks; docs/lm_eval.md)
# and one rule in Snakemake's own process, last: last_record (last_run.smk), randopt/result/last_run.py's publish
# (results/record.json, a copy of the run's record, which names its folder).
# The stages' parts lie in rooms named after the method: randopt/engines/ (the engines, and perturb.py over
# randopt/kernels/), scoring/, selection/, ensemble/, records/, model/, data/, tasks/, result/ (export, ask), harness/
# (lm-eval); plan/ decides the run from its config (and holds the speed model); runtime/ is how jobs run.
# No room imports one that imports it back (tests/test_import_graph.py).
#
# snakemake --lint (tests/test_lint.py runs it): four lints remain, each justified where it stands.
#   lint: no rule has a conda: environment or container. The software is pinned in envs/ and installed
#   once (make env; docs/gpu.md for vLLM); no conda channel is reachable where this is built and tested,
#   so a conda: directive could be neither resolved nor tested here.
#   lint: LOCAL_ENGINE in the engine stages' commands (rules/common.smk says why); DISTILL_LOCAL, its
#   twin, in distillation's GPU commands when distill.enabled (rules/distill.smk).
#   lint: JOB_ENGINES in the train-scoring commands, evaluate_shard and race_slice (rules/common.smk says why).
#   lint: PY in every stage's command (rules/common.smk says why).
# snakefmt formats this file and rules/ (its line length: pyproject.toml; tests/test_snakefmt.py checks it).
import os
import sys

from snakemake.utils import min_version, update_config

min_version("9.0")

sys.path.insert(0, workflow.basedir)  # this checkout's randopt/, whatever directory the workflow runs in
from randopt.config import ConfigError, load_yaml
from randopt.config_args import typed_config_args

# The embedded default; --configfile files given on the command line are merged over it. Read here first so that
# a YAML error in it names its file, line and column (Snakemake's own "not valid JSON or YAML" names neither;
# Snakemake reads the --configfile files before this file runs: profiles/default/config.yaml reads them first).
EMBEDDED_CONFIG = os.path.join(workflow.basedir, "config", "config.yaml")
try:
    load_yaml(EMBEDDED_CONFIG)
except ConfigError as err:
    raise WorkflowError(f"invalid config: {err}")


configfile: EMBEDDED_CONFIG


# --config KEY=VALUE: Snakemake keeps a nested VALUE's scalars strings ({"n_seeds": 48} gives "48"); typed again here,
# as YAML, before anything reads the config (randopt/config_args.py).
try:
    update_config(config, typed_config_args(workflow.config_settings.config_args))
except ConfigError as err:
    raise WorkflowError(f"invalid config: {err}")


include: "rules/common.smk"


rule all:
    default_target: True
    input:
        # the last run's record (a copy of this run's, which names its folder: rules/last_run.smk)
        LAST_RECORD,
        # the report's figures (rules/report.smk, included below; a function, so it is read then)
        lambda wildcards: rules.figures.output,
        # lm-eval's table of the base and the ensembles, when config lm_eval.tasks names tasks (rules/lm_eval.smk)
        lambda wildcards: rules.lm_eval.output.table if CONFIG.lm_eval.tasks else [],


include: "rules/data.smk"
include: "rules/model.smk"
include: "rules/search.smk"


if PLAN.racing:  # selection.mode racing: the search's rounds (the rank rule reads their tables)

    include: "rules/racing.smk"


include: "rules/ensemble.smk"


if PLAN.distill:  # distill.enabled: the top-k vote distilled into a LoRA of the base, and its control

    include: "rules/distill.smk"


include: "rules/record.smk"
include: "rules/export.smk"
include: "rules/report.smk"
include: "rules/last_run.smk"
include: "rules/lm_eval.smk"


# Resident engines (engine.keep_loaded_s; randopt/runtime/resident/) and the CUDA MPS daemon they share a GPU under
# (engine.cuda_mps; randopt/runtime/mps_daemon.py) serve this run only: the daemon starts with it, and both stop
# when it ends, however it ends (a killed run's engines after keep_loaded_s idle seconds, then its daemon). The
# run's config is written at the start, so that `make status` sees the run before its record exists.
onstart:
    check_engine_here()
    write_run_folder()
    start_run_engines()


onsuccess:
    stop_run_engines()


onerror:
    stop_run_engines()
