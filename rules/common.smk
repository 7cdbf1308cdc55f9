# The run's plan (randopt/plan/: every decision made from the config and this host, once), and the input,
# param and resource functions the rules read it through.
import json
import os
import shlex
import sys

from randopt.block_files import write_block
from randopt.code_keys import code_version, modules_version
from randopt.config import ConfigError, check_engine_installed
from randopt.inputs import CACHE_PATH as INPUT_CACHE
from randopt.io import InputError
from randopt.keys import key_code
from randopt.plan import Host, PlanError, RunPlan
from randopt.plan.search_change import search_change_note
from randopt.paths import LAST_RECORD, MEMBER_FILE, RACE_CHUNK_STEM, RACE_SURVIVORS
from randopt.result.last_run import publish
from randopt.result.run_started import write_run_config
from randopt.population import SHARD_STEM, sigma_label
from randopt.runtime import mps_daemon
from randopt.runtime.resident import DEFAULT_DIR as RESIDENT_DIR, stop_all as stop_resident_engines

# At DAG build (also under -n), before any job: the schema; what needs the file system (a local model dir,
# a GGUF's package or parts, the task's files, a held-out file); the external inputs' sha256s (read
# once, then from a stat cache in .snakemake/), which key the stages that read them; then the plan on this
# host. A frozen file edited since its stage wrote it is refused here too: Snakemake would see it as newer
# than what was built on it and delete those outputs before the first job could refuse to run.
try:
    PLAN = RunPlan.from_config(config, Host.of_workflow(workflow), INPUT_CACHE)
    PLAN.verify_frozen()
except ConfigError as err:
    raise WorkflowError(f"invalid config: {err}")
except (PlanError, InputError) as err:
    raise WorkflowError(str(err))
for note in PLAN.notes:  # not an error: the run is right, only slower than it could be
    print(f"randopt: {note}", file=sys.stderr)
# A knob that changes answers (engine.batch_size) reruns the whole search, rightly; Snakemake would only say
# "missing output files", so one line names the knobs that differ from the last finished run of this run_name.
SEARCH_CHANGE = search_change_note(PLAN.config, PLAN.inputs, PLAN.run_key)
if SEARCH_CHANGE:
    print(f"randopt: {SEARCH_CHANGE}", file=sys.stderr)
config = PLAN.config  # Snakemake's own view of the run's config: what the plan validated and resolved
KEYS, PATHS, DECODE, ENGINES, CONFIG = PLAN.keys, PLAN.paths, PLAN.decode, PLAN.engines, PLAN.blocks
# The round rules' folders: their round's keys as wildcards (randopt/plan/rounds.py), so a path names its round.
ROUND = PLAN.rounds.pattern()
if ENGINES.side_by_side:  # jobs are scheduled over this host's engine slots (GPU groups x engines each)
    workflow.global_resources["engine_slot"] = ENGINES.slots

# Stage CLIs run as modules of this checkout, whatever directory the workflow runs in; a PYTHONPATH set by the
# caller (packages installed with --target) stays behind it. In every rule's shell command (snakemake --lint
# reports it, on purpose): in params, the interpreter's path would make a copy of the repo or another venv rerun
# finished jobs; a shell.prefix function would make the commands `snakemake -p` prints unrunnable by hand.
PY = f"PYTHONPATH={shlex.quote(workflow.basedir)}${{PYTHONPATH:+:$PYTHONPATH}} {shlex.quote(sys.executable)} -m"
# The engine stages' flags for sharing this host (randopt/plan/engines.py): in the shell command, not in params,
# since they change no result (`snakemake --lint` reports them, on purpose): in params, a run moved between a
# local host and a cluster, or given another engine layout, would rerun every job it had finished. LOCAL_ENGINE
# is empty on a cluster, JOB_ENGINES (engines side by side inside a cluster job) empty on a local run. They are
# two names, not one, since only the train-scoring stages (evaluate_shard, race_slice) start engines of their own
# inside a job; the other engine stages would accept --engines-in-job and ignore it.
MPS_DIR = mps_daemon.DEFAULT_DIR
LOCAL_ENGINE = ENGINES.local_flags(RESIDENT_DIR, MPS_DIR)
JOB_ENGINES = ENGINES.job_flags()
DISTILL_LOCAL = ENGINES.distill_flags(RESIDENT_DIR)


wildcard_constraints:
    **PLAN.rounds.key_regex(),
    sigma=r"[0-9][0-9.e+-]*",
    round=r"\d\d",
    chunk=r"\d\d\d",
    part=r"\d+",
    first=r"\d\d\d\d+",
    last=r"\d\d\d\d+",


# Cluster resources (profiles/slurm): small stages run in the Snakemake process itself; the heavy ones are
# submitted as jobs sized from the resources block. None of this changes a result or a local run.
localrules:
    all,
    freeze_problems,
    fetch_fineweb,
    rank,
    vote,
    record,
    figures,
    last_record,


def q(text):
    """One shell word holding a plain string (a model id, a path)."""
    return shlex.quote(text)


def block(value):
    """A config block (JSON-ready) as a stage gets it: the path of a file holding it, .snakemake/blocks/<sha256 of
    its text>.json, written here at DAG build if it is not there yet (randopt/block_files.py says why a file,
    not JSON on the command line: the commands, SLURM submissions and `reason:` lines stay short). A param
    holding the path changes exactly when the block does."""
    try:
        return write_block(value)
    except OSError as err:
        raise WorkflowError(
            f"cannot write a config block file for the stages: {err}; the directory the workflow "
            "runs in must be writable"
        )


def engine_args(model_dir=None, generating=True, **extra):
    """The engine flags of a stage on model_dir (the prepared model's by default): its options in a block file."""
    return PLAN.engine_args(block(PLAN.engine_options(generating, **extra)), model_dir)


def round_of(wildcards) -> int:
    """The round (1, 2, ...) of a job of a round's rules, from the eval key in its path."""
    return PLAN.rounds.of_eval(wildcards.ekey)


def round_path(name, below=None):
    """An input function: the job's round's folder of that name (randopt/paths.py), or a path below it."""
    return lambda wildcards: "/".join(filter(None, (PLAN.rounds.paths(round_of(wildcards))[name], below)))


def round_engine_args(generating=True, **extra):
    """A param function: the engine flags on the job's round's base model (round 1: the prepared model)."""
    return lambda wildcards: engine_args(
        f"{PLAN.rounds.paths(round_of(wildcards))['model']}/model", generating, **extra
    )


def distill_knob(name):
    """A param function: the job's round's distill knob (randopt/config.py round_knobs); a block as its file."""

    def knob(wildcards):
        value = PLAN.round_knobs(round_of(wildcards))[name]
        return block(value) if isinstance(value, dict) else value

    return knob


def job_threads(gpu_stage=True):
    """A heavy stage's threads: every core on a local run, or an engine slot's share; a cluster job's CPUs."""
    # workflow.cores raises where no --cores was given (a cluster's submit host): that case needs none
    return PLAN.threads(None if ENGINES.on_cluster else workflow.cores, gpu_stage)


def job_resources(stage, gpu_stage=True):
    """A heavy stage's job resources, as the SLURM executor plugin names them (randopt/plan/engines.py)."""
    return PLAN.resources(stage, gpu_stage)


def get_benchmarks():
    """RULE=PATH for every stage's Snakemake benchmark file, so the record can sum stage times (randopt/plan/run.py
    benchmark_files). Called by rule record, after every rule it names."""
    # the rules' patterns as written (a Rule's own has the wildcard constraints folded in)
    patterns = {rule.name: str(getattr(rules, rule.name).benchmark) for rule in workflow.rules if rule.benchmark}
    return PLAN.benchmark_files(patterns)


def check_engine_here():
    """The run's start (the Snakefile's onstart), before any job: where engine jobs will run on this host, their
    engine must be installed here (engine.kind vllm: vLLM). Not at DAG build: a dry run of a GPU config on a
    CPU machine or login node, which has no vLLM, is a legitimate use (onstart never runs under -n), and so is
    a cluster's submit host (its jobs run elsewhere). Engine jobs are those that claim a GPU or an engine slot;
    a run that only redraws figures needs no engine."""
    if ENGINES.on_cluster or workflow.touch:
        return
    if any(job.resources.get("gpu", 0) or job.resources.get("engine_slot", 0) for job in workflow.dag.needrun_jobs()):
        try:
            check_engine_installed(PLAN.config)
        except ConfigError as err:
            raise WorkflowError(f"invalid config: {err}")


def write_run_folder():
    """The run's start (the Snakefile's onstart, never under -n): its config, before its record, so that
    `make status` finds the run in progress and reads its config (randopt/result/run_started.py)."""
    write_run_config(PLAN.run_key, PLAN.config)


def start_run_engines():
    """The run's start (the Snakefile's onstart, never under -n): its CUDA MPS daemon, when it has one."""
    if ENGINES.own_mps:
        try:
            mps_daemon.start(MPS_DIR, run_pid=os.getpid(), resident_dir=RESIDENT_DIR)
        except mps_daemon.MpsDaemonError as err:
            raise WorkflowError(str(err))


def stop_run_engines():
    """The run's end, however it ends: the resident engines, then the MPS daemon they were clients of."""
    stop_resident_engines(RESIDENT_DIR)
    if ENGINES.own_mps:
        mps_daemon.stop(MPS_DIR)
