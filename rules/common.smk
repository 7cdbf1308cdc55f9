# Shared helpers: config validation, path keys, and the get_* input/param functions.
import json
import os
import shlex
import sys

from randopt.config import (
    ConfigError,
    check_engine_installed,
    check_inputs,
    decode_for,
    gsm8k_source,
    heldout_source,
    problems_block,
    problems_key,
    task_spec,
    validate,
)
from randopt.engines.compute_dtype import for_config as compute_dtype_for_config
from randopt.code_keys import code_version
from randopt.keys import key_code, round_keys, short_key
from randopt.paths import layout
from randopt.population import Population, sigma_label
from randopt.scoring.answer_blocks import block_size
from randopt.selection.plan import RacePlan
from randopt.io import InputError
from randopt.engines.base import DEFAULT_MAX_MODEL_LEN
from randopt.inputs import CACHE_PATH as INPUT_CACHE
from randopt.model import gguf_source
from randopt.model.shape import resolve_config as resolve_shape_config, weight_bytes as shape_weight_bytes
from randopt.runtime.engine_slots import (
    CARD_BYTES,
    EngineLayout,
    check_fit as check_engines_fit,
    gguf_weight_bytes,
    idle_engines_note,
    resolve as resolve_engines,
    weight_bytes,
)
from randopt.runtime.resident import DEFAULT_DIR as RESIDENT_DIR, stop_all as stop_resident_engines
from randopt.runtime import cuda_mps, mps_daemon

# At DAG build (also under -n), before any job: the schema, then what needs the file system (a local
# model dir exists; the tensor-parallel size divides its attention heads; a GGUF's package or parts are
# there; a task's or GSM8K's files parse and hold the splits; a held-out file exists), then the external
# inputs' sha256s (randopt/inputs.py: read once, then from a stat cache in .snakemake/), which the keys
# of the stages that read them hold.
try:
    config = validate(config)
    INPUT_SHA256 = {name: digest.sha256 for name, digest in check_inputs(config, INPUT_CACHE).items()}
except ConfigError as err:
    raise WorkflowError(f"invalid config: {err}")

# Each round's keys, round 1 first (distill.rounds; a run without distillation has one round): KEYS are
# round 1's, the run's as they always were.
ROUND_KEYS = round_keys(config, inputs=INPUT_SHA256)
KEYS = ROUND_KEYS[0]
REPO = workflow.basedir
# Members, shards and k per fraction: one object (randopt/population.py), read by the stages too.
POPULATION = Population.from_config(config)
# The task (config task.kind; randopt/tasks/): its block holds the split sizes and pins (gsm8k for GSM8K),
# DECODE is the decode block with the task's prompt (GSM8K's is the decode block itself).
TASK = config["task"]["kind"]
PROBLEMS = problems_block(config)
DECODE = decode_for(config)


# Stage CLIs run as modules of this checkout, whatever directory the workflow runs in; a PYTHONPATH
# set by the caller (packages installed with --target) stays behind it. Each rule's shell command uses
# PY from here (snakemake --lint reports it, on purpose): in params, the interpreter's path would make a
# copy of the repo or another venv rerun finished jobs; and a shell.prefix function instead would make
# the commands that `snakemake -p` prints no longer runnable by hand.
PY = f"PYTHONPATH={shlex.quote(REPO)}${{PYTHONPATH:+:$PYTHONPATH}} {shlex.quote(sys.executable)} -m"

# A round's keys in the round rules' paths (ROUND_PATTERN below): each exactly one of the run's rounds' (mkey: a
# later round's base model, rule round_base; round 1's is prepare_model's; "(?!)" matches nothing).
ROUND_KEY_REGEX = {
    name: "|".join(sorted({keys[key] for keys in ROUND_KEYS[first:] if keys.get(key)})) or "(?!)"
    for name, key, first in (
        ("ekey", "eval", 0),
        ("bkey", "bpb", 0),
        ("mkey", "model", 1),
        ("dkey", "distill_data", 0),
        ("tkey", "distill_train", 0),
        ("vkey", "distill_eval", 0),
    )
}


wildcard_constraints:
    ekey=ROUND_KEY_REGEX["ekey"],
    bkey=ROUND_KEY_REGEX["bkey"],
    mkey=ROUND_KEY_REGEX["mkey"],
    dkey=ROUND_KEY_REGEX["dkey"],
    tkey=ROUND_KEY_REGEX["tkey"],
    vkey=ROUND_KEY_REGEX["vkey"],
    sigma=r"[0-9][0-9.e+-]*",
    round=r"\d\d",
    chunk=r"\d\d\d",
    first=r"\d\d\d\d+",
    last=r"\d\d\d\d+",


# data/ holds the pipeline's inputs (frozen splits, the held-out slice, prepared models); results/ holds
# what the search computes from them. Both are keyed by content, so either can be kept or deleted alone.
# The layout is defined once, in randopt/paths.py (tools that read a finished run use it too).
PATHS = layout(KEYS)
DATA_PROBLEMS = PATHS["problems"]
# Each freeze rule's folder: the run's task's is DATA_PROBLEMS, the other kind's an "unused" one (both
# rules exist in every run, so that rules/data.smk stays flat; nothing asks for the unused outputs).
DATA_GSM8K = DATA_PROBLEMS if TASK == "gsm8k" else "data/gsm8k/unused"
DATA_TASK = DATA_PROBLEMS if TASK != "gsm8k" else "data/tasks/unused"
DATA_HELDOUT = PATHS["heldout"]
MODEL = PATHS["model"]
SHARDS = PATHS["shards"]
ANSWER_CACHE = PATHS["answer_cache"]
RACE = PATHS["race"]
RANK = PATHS["rank"]
MEMBERS = PATHS["members"]
VOTE = PATHS["vote"]
BPB = PATHS["bpb"]
EXPORT = PATHS["export"]
BENCH = PATHS["benchmarks"]

# Rounds (distill.rounds, docs/distill.md): round r >= 2 searches, votes and distills on round r-1's
# distilled model (rule round_base links it in as data/models/<round r's model key>). The rules of the
# search, the ensemble and distillation serve every round: their paths hold the round's keys as
# wildcards (ekey: eval, bkey: bpb, mkey: model, dkey, tkey, vkey: distill data, train, eval), each
# constrained to the run's rounds' keys, so a path names its round, and round_of(wildcards) finds it.
# ROUND_PATTERN is the layout (randopt/paths.py) over those wildcards, ROUND_PATHS each round's folders.
ROUND_PATHS = [layout(keys) for keys in ROUND_KEYS]
ROUND_WILDCARDS = {
    "eval": "ekey",
    "bpb": "bkey",
    "model": "mkey",
    "distill_data": "dkey",
    "distill_train": "tkey",
    "distill_eval": "vkey",
}
ROUND_PATTERN = layout(KEYS | {key: f"{{{name}}}" for key, name in ROUND_WILDCARDS.items() if key in KEYS})
ROUND_OF_EVAL = {keys["eval"]: r for r, keys in enumerate(ROUND_KEYS, 1)}
ROUND_OF_MODEL = {keys["model"]: r for r, keys in enumerate(ROUND_KEYS, 1)}


def round_of(wildcards) -> int:
    """The round (1, 2, ...) of a job of a round's rules, from the eval key in its path."""
    return ROUND_OF_EVAL[wildcards.ekey]


def round_path(name, below=None):
    """An input function: the job's round's folder of that name (randopt/paths.py), or a path below it."""

    def path(wildcards):
        folder = ROUND_PATHS[round_of(wildcards) - 1][name]
        return f"{folder}/{below}" if below else folder

    return path


def at_round(pattern, r):
    """The path of round r from a path pattern of the round rules (its key wildcards filled in, others left)."""
    for key, name in ROUND_WILDCARDS.items():
        if key in ROUND_KEYS[r - 1]:
            pattern = pattern.replace(f"{{{name}}}", ROUND_KEYS[r - 1][key])
    return pattern


def verify_frozen_files():
    """Before any job is scheduled: a frozen split or held-out slice edited since its stage wrote it
    is an error naming the file and both hashes. Checked here, not only in the jobs that read it,
    because Snakemake sees the edited file as newer than the shards built on it and would delete
    their outputs before the first job could refuse to run."""
    from randopt.io import InputError, verify_against_manifest

    for path in (f"{DATA_PROBLEMS}/train.jsonl", f"{DATA_PROBLEMS}/test.jsonl", f"{DATA_HELDOUT}/heldout.jsonl"):
        if os.path.isfile(path):
            try:
                verify_against_manifest(path)
            except InputError as err:
                raise WorkflowError(str(err))


verify_frozen_files()


def source_sha256_arg(name):
    """--source-sha256 of the stage that reads the external input `name` (model, problems, heldout): the DAG
    build's sha256, which its key holds, so that the stage refuses other bytes. Empty where the input has
    no local bytes (generated data, a hub revision, a shape)."""
    return f"--source-sha256 {INPUT_SHA256[name]}" if name in INPUT_SHA256 else ""


def q(obj):
    """One shell word holding obj as JSON (or a plain string as itself)."""
    return shlex.quote(obj if isinstance(obj, str) else json.dumps(obj))


def q_text(obj):
    """q(obj) as a param that may hold braces (a task's template "{numbers}", MATH's "\\boxed{}"): a
    function, so that Snakemake does not read them as wildcards."""
    return lambda wildcards: q(obj)


# One shard's path below its stage folder (POPULATION.shard_stems() spells each one); {sigma},
# {first} and {last} are wildcards in rules.
SHARD_STEM = "sigma={sigma}/seeds_{first}-{last}"


def get_shards(suffix=".parquet", r=1):
    return [f"{ROUND_PATHS[r - 1]['shards']}/{stem}{suffix}" for stem in POPULATION.shard_stems()]


def race_chunk_stems(round_index):
    return [f"round={round_index:02d}/chunk_{c:03d}" for c in range(RACE_PLAN.chunks)]


def race_survivors(round_index):
    return f"{RACE}/round={round_index:02d}/survivors.json"


def get_search_tables(suffix=".parquet", r=1):
    """The tables round r's ranking reads: full evaluation's shards, or every racing round's chunk tables
    (racing: round 1 only, randopt/config.py)."""
    if not RACING:
        return get_shards(suffix, r)
    return [f"{RACE}/{stem}{suffix}" for r in range(RACE_PLAN.rounds) for stem in race_chunk_stems(r)]


def get_race_rounds():
    """Racing: each round's survivors file, round 0 first (rank reads their reports); else none."""
    return [race_survivors(r) for r in range(RACE_PLAN.rounds)] if RACING else []


# auto resolved here, on the host that builds the DAG: jobs get a concrete dtype, the one in the keys.
COMPUTE_DTYPE, COMPUTE_DTYPE_WHY = compute_dtype_for_config(config)


def get_engine_options():
    e = config["engine"]
    options = {"device": e["device"], "batch_size": e["batch_size"]}
    if e["kind"] == "torch":
        options["trust_remote_code"] = config["model"]["trust_remote_code"]
        options["compute_dtype"] = COMPUTE_DTYPE
        if config["perturbation"]["switch"] != "reconstruct":  # only when chosen: default params stay
            options["switch"] = config["perturbation"]["switch"]
        if e["torch_decode"] != "eager":  # only when chosen, as the switch
            options["decode"] = e["torch_decode"]
    else:
        options |= {
            "tensor_parallel_size": e["tensor_parallel_size"],
            "gpu_memory_utilization": e["gpu_memory_utilization"],
            "trust_remote_code": config["model"]["trust_remote_code"],
        }
        if e["worker_process"]:  # only when chosen: the default's params stay
            options["worker_process"] = True
    if config["perturbation"]["noise"] != "rademacher":  # both engines; only when chosen, as the switch
        options["noise"] = config["perturbation"]["noise"]
    return options


def get_engine_args(model_dir=None, **extra_options):
    """Engine flags of the stage CLIs (the rule's shell adds --threads {threads}); model_dir: the
    prepared model's by default (a later round's base, or evaluate_distilled's fine-tuned model, else)."""
    return (
        f"--model-dir {model_dir or f'{MODEL}/model'} --engine {config['engine']['kind']} "
        f"--engine-options {q(get_engine_options() | extra_options)}"
    )


def get_generating_engine_args(model_dir=None):
    """Engine flags of the stages that generate answers: engine.speculation reaches only them (score_bpb
    scores given text, where drafts have nothing to do; only when on, so the default's params stay)."""
    e = config["engine"]
    speculation = (
        {"speculation": e["speculation"], "draft_tokens": e["draft_tokens"]} if e["speculation"] != "none" else {}
    )
    return get_engine_args(model_dir, **speculation)


def bpb_engine_options():
    """score_bpb's engine: the search's own (so a resident engine serves it too, one start fewer a run: ~35 s
    of SmolLM2's 190 s on the H200, bench/peers/README.md), its window given per call (--max-context);
    except where the window does not fit the vLLM engine's default context, which then needs an engine
    started for it."""
    window = config["heldout"]["max_context"]
    return {"max_context": window} if config["engine"]["kind"] == "vllm" and window + 1 > DEFAULT_MAX_MODEL_LEN else {}


def round_engine_args(generating=True, **extra_options):
    """A param function: the engine flags on the job's round's base model (round 1: the prepared model)."""

    def args(wildcards):
        model_dir = f"{ROUND_PATHS[round_of(wildcards) - 1]['model']}/model"
        return get_generating_engine_args(model_dir) if generating else get_engine_args(model_dir, **extra_options)

    return args


# lm-evaluation-harness after the record (rules/lm_eval.smk): its folder, under the run's keys and a key
# of the lm_eval block, and lm-eval's own arguments from that block.
LM_EVAL = config["lm_eval"]
LM_EVAL_DIR = f"results/lm_eval/{KEYS['eval']}/{KEYS['population']}/{short_key(LM_EVAL)}"


def get_lm_eval_args():
    """lm-eval's arguments from the config block (the rest of them: lm_eval.args, as given)."""
    args = ["--tasks", ",".join(LM_EVAL["tasks"])]
    args += ["--limit", str(LM_EVAL["limit"])] if LM_EVAL["limit"] is not None else []
    args += ["--num_fewshot", str(LM_EVAL["num_fewshot"])] if LM_EVAL["num_fewshot"] is not None else []
    args += ["--include_path", LM_EVAL["include_path"]] if LM_EVAL["include_path"] else []
    return " ".join(shlex.quote(a) for a in args + list(LM_EVAL["args"]))


# Cluster resources (profiles/slurm). Small stages run in the Snakemake process itself; the heavy ones
# are submitted as jobs sized from config["resources"]. None of this changes a result or a local run.
localrules:
    all,
    freeze_gsm8k,
    freeze_task,
    fetch_fineweb,
    rank,
    race_round,
    vote,
    record,
    figures,


def on_cluster():
    """True when jobs go to a cluster: the submitting process of a cluster executor (no --cores given)
    and the Snakemake process inside each submitted job (remote execution mode)."""
    from snakemake_interface_executor_plugins.settings import ExecMode

    return workflow.resource_settings.cores is None or workflow.exec_mode == ExecMode.REMOTE


def job_gpus():
    """GPUs a GPU stage asks for: the tensor-parallel size under vLLM, one for the torch engine on
    CUDA, none otherwise (the CPU default asks for none)."""
    e = config["engine"]
    if e["kind"] == "vllm":
        return e["tensor_parallel_size"]
    return 1 if str(e["device"]).startswith("cuda") else 0


def local_gpus():
    """N of `--resources gpu=N` on a local run with a GPU engine (the GPUs of this host the run may
    use), else None. Snakemake then runs GPU jobs side by side while their `gpu` resources (each
    job's GPU count) sum to at most N, and each job claims its own GPUs (randopt/runtime/gpu_slots.py)."""
    gpus = job_gpus()
    if on_cluster() or not gpus:
        return None
    n = workflow.global_resources.get("gpu").value
    if n is None:
        return None
    if not isinstance(n, int) or n < gpus or n % gpus:
        raise WorkflowError(
            f"--resources gpu={n}: each GPU job uses {gpus} GPUs (engine.tensor_parallel_size "
            f"under vLLM, 1 for torch on cuda), so give a multiple of {gpus}"
        )
    return n


# The engine stages' flags for sharing this host on a local run (in the shell command, not in params:
# neither changes a result, so a run with other values finds the same outputs up to date; `snakemake
# --lint` reports LOCAL_ENGINE as a variable from outside the rule, on purpose). Empty on a cluster.
#   --gpu-slots N: claim the job's GPUs among N (randopt/runtime/gpu_slots.py); with --resources gpu=N only.
#   --engines-per-device E: claim one of E engine slots of the job's GPUs (or of the CPU), E from
#   engine.engines_per_gpu (ENGINES below; randopt/runtime/engine_slots.py); engine_slot resources
#   then schedule the jobs.
#   --keep-loaded-s S: use the device's resident engine (randopt/runtime/resident/), so jobs after the first
#   start no engine; engine.keep_loaded_s, 0 turns it off. The Snakefile's onsuccess/onerror stop them.
LOCAL_GPUS = local_gpus()
KEEP_LOADED_S = 0 if on_cluster() else config["engine"]["keep_loaded_s"]


def model_weight_bytes():
    """The model's weight bytes when the DAG is built (for engine.engines_per_gpu auto), or None: the
    prepared model dir, a local model, or the wheel's GGUF tensor table (read only when needed)."""
    m = config["model"]
    if m["source"] == "shape":  # no files: from the config, in its dtype
        return shape_weight_bytes(resolve_shape_config(m["config"]), m["dtype"])
    found = weight_bytes(f"{MODEL}/model") or (weight_bytes(m["path"]) if m["source"] == "local" else None)
    if (
        found is None
        and m["source"] in ("gguf_wheel", "gguf")
        and job_gpus()
        and config["engine"]["engines_per_gpu"] == "auto"
    ):
        # the tensor table, read through the parts as one stream (resolvable: checked above)
        found = gguf_weight_bytes(gguf_source.open_joined(m), m["dtype"])
    return found


def mps_choice():
    """Whether this run may put its engines under CUDA MPS (engine.cuda_mps; randopt/runtime/cuda_mps.py): read
    before the engine layout, since auto sizes engines_per_gpu from MPS's gains where it may. engine.cuda_mps
    true where MPS cannot serve is a DAG-build error naming what is missing."""
    try:
        return cuda_mps.resolve(config["engine"]["cuda_mps"], gpus_per_engine=job_gpus(), on_cluster=on_cluster())
    except ValueError as err:
        raise WorkflowError(f"invalid config: {err}")


MPS = mps_choice()


def engine_layout():
    """Engines side by side on each device (engine.engines_per_gpu; randopt/runtime/engine_slots.py); under
    vLLM the layout (tensor_parallel_size x engines) is checked against the card where its size is known
    (a misfit is a DAG-build error with the numbers and the largest number that fits)."""
    requested, gpus = config["engine"]["engines_per_gpu"], job_gpus()
    try:
        weights = model_weight_bytes() if gpus else None
        if gpus and not LOCAL_GPUS and not on_cluster():
            # without --resources gpu=N, engine jobs claim no GPUs (all see every GPU): one engine
            if requested not in ("auto", 1):
                raise WorkflowError(
                    f"invalid config: engine.engines_per_gpu {requested} on GPUs needs --resources "
                    f"gpu=N (the GPUs of this host the run may use), so that each engine job claims "
                    f"its slot"
                )
            layout = EngineLayout(1, "no --resources gpu=N: engine jobs claim no GPU slots, so one engine")
        else:
            groups = LOCAL_GPUS // gpus if LOCAL_GPUS else 1
            layout = resolve_engines(
                requested,
                gpus_per_engine=gpus,
                on_cluster=on_cluster(),
                weight_bytes=weights,
                members_per_group=-(-POPULATION.size // groups),
                work=PROBLEMS["n_train"] * DECODE["max_tokens"],  # the run's task's
                under_mps=MPS.possible,
                shard_members=group_shard_members(groups),
            )
        if config["engine"]["kind"] == "vllm" and weights and (card := card_bytes()):
            check_engines_fit(layout.per_device, weights / gpus, card, tp=gpus)
    except ValueError as err:
        raise WorkflowError(f"invalid config: {err}")
    return layout


def group_shard_members(groups):
    """Full evaluation: the members of each search shard one GPU group answers, in the order Snakemake hands them
    out (the shards dealt round the groups); racing: None (its slices are cut to fit the engine slots)."""
    if config["selection"]["mode"] == "racing":
        return None
    sizes = [b - a + 1 for _ in POPULATION.sigmas for a, b in POPULATION.shard_ranges()]
    return sizes[::groups]


def card_bytes():
    """The memory of the card the engines get, or None (unknown: the engine checks when it starts): on a
    cluster resources.gpu_model's when it is a known one (randopt/runtime/engine_slots.py CARD_BYTES), else
    GPU 0's on this host, else (a host without CUDA, e.g. a dry run on a login node) gpu_model's again."""
    known = CARD_BYTES.get((config["resources"]["gpu_model"] or "").lower())
    if on_cluster() and known:
        return known
    return local_card_bytes() or known


def local_card_bytes():
    """GPU 0's memory on this host, or None (no CUDA here: the engine checks when it starts)."""
    try:
        import torch

        return torch.cuda.get_device_properties(0).total_memory if torch.cuda.is_available() else None
    except Exception:  # no usable CUDA on the host that builds the DAG
        return None


ENGINES = engine_layout()
if (
    not on_cluster()
    and (_shards := group_shard_members(LOCAL_GPUS // job_gpus() if LOCAL_GPUS else 1)) is not None
    and (_note := idle_engines_note(ENGINES.per_device, len(_shards)))
):
    print(f"randopt: {_note}", file=sys.stderr)  # not an error: the run is right, only slower than it could be
# CUDA MPS for this run: a daemon of its own in MPS_DIR (started by the Snakefile's onstart, stopped with the
# resident engines; randopt/runtime/mps_daemon.py), unless the caller's daemon serves (MPS.external).
MPS_ON = MPS.enabled(ENGINES.per_device)
MPS_DIR = mps_daemon.DEFAULT_DIR
OWN_MPS = MPS_ON and not MPS.external
# Engine slots of this host: GPU groups x engines each (the CPU: engines); jobs are scheduled over them.
# On a cluster a job's engines side by side are its own (JOB_ENGINES): one slot a job, as with one engine.
SIDE_BY_SIDE = ENGINES.per_device > 1 and not on_cluster()
ENGINE_SLOTS = (LOCAL_GPUS // job_gpus() if LOCAL_GPUS else 1) * (ENGINES.per_device if SIDE_BY_SIDE else 1)
if SIDE_BY_SIDE:
    workflow.global_resources["engine_slot"] = ENGINE_SLOTS
LOCAL_ENGINE = (
    (f" --gpu-slots {LOCAL_GPUS}" if LOCAL_GPUS else "")
    + (f" --engines-per-device {ENGINES.per_device}" if SIDE_BY_SIDE else "")
    + (" --gpu-lock-dir .snakemake/gpu-locks" if LOCAL_GPUS or SIDE_BY_SIDE else "")
    + (f" --keep-loaded-s {KEEP_LOADED_S:g} --resident-dir {RESIDENT_DIR}" if KEEP_LOADED_S else "")
    + (f" --cuda-mps-dir {MPS_DIR}" if OWN_MPS else "")
)
# The train-scoring stages' engines side by side inside each cluster job (randopt/runtime/job_engines.py): the
# job starts engine.engines_per_gpu engines of its own on its GPU group and stops them when it ends. In the
# shell command like LOCAL_ENGINE: it changes no answer.
JOB_ENGINES = f" --engines-in-job {ENGINES.per_device}" if ENGINES.per_device > 1 and on_cluster() else ""


def check_engine_here():
    """The run's start (the Snakefile's onstart), before any job: where engine jobs will run on this host, their
    engine must be installed here (engine.kind vllm: vLLM). Not at DAG build: a dry run of a GPU config on a
    CPU machine or login node, which has no vLLM, is a legitimate use (onstart never runs under -n), and so is
    a cluster's submit host (its jobs run elsewhere; on_cluster). Engine jobs are those that claim a GPU or an
    engine slot (job_resources); a run that only redraws figures needs no engine."""
    if on_cluster() or workflow.touch:
        return
    if any(job.resources.get("gpu", 0) or job.resources.get("engine_slot", 0) for job in workflow.dag.needrun_jobs()):
        try:
            check_engine_installed(config)
        except ConfigError as err:
            raise WorkflowError(f"invalid config: {err}")


def start_run_engines():
    """The run's start (the Snakefile's onstart, never under -n): its CUDA MPS daemon, when it has one."""
    if OWN_MPS:
        try:
            mps_daemon.start(MPS_DIR, run_pid=os.getpid(), resident_dir=RESIDENT_DIR)
        except mps_daemon.MpsDaemonError as err:
            raise WorkflowError(str(err))


def stop_run_engines():
    """The run's end, however it ends: the resident engines, then the MPS daemon they were clients of."""
    stop_resident_engines(RESIDENT_DIR)
    if OWN_MPS:
        mps_daemon.stop(MPS_DIR)


# The torch engine answers train problems in fixed blocks of a seeded order (randopt/scoring/answer_blocks.py),
# so a problem's answer never depends on the mode that asked for it; None (vLLM): one block.
ANSWER_BLOCK = block_size(config["engine"])
ORDER_SEED = config["selection"]["order_seed"]
# engine.member_batch (torch engine, full evaluation): seeds evaluate_shard decodes together; passed only
# above 1, so the default's jobs keep their command lines.
MEMBER_BATCH = config["engine"]["member_batch"]


# Racing (selection.mode racing, rules/racing.smk): the rounds are a pure function of the split size and
# the knobs, so the whole DAG is known at build time. The plan (randopt/selection/plan.py) is made here,
# once, and every racing job reads it as JSON: rounds, checkpoints, k, and RACE_PLAN.chunks race_slice
# jobs a round, split over at least one job per GPU group under --resources gpu=N, so no GPU idles
# while another races (on the CPU a job takes every core: one at a time; on a cluster the shard size
# alone decides).
RACING = config["selection"]["mode"] == "racing"
# distill.enabled: rules/distill.smk joins the DAG (docs/distill.md); off, no rule, key or path changes.
DISTILL_ENABLED = config["distill"]["enabled"]
RACE_PLAN = None
if RACING:
    try:
        RACE_PLAN = RacePlan.from_config(config, parallel=ENGINE_SLOTS)
    except ValueError as err:
        raise WorkflowError(f"invalid config: {err}")
    if RACE_PLAN.rounds == 1:
        # Not an error (the run is full evaluation in racing's clothes), but not what racing is for.
        print(
            f"randopt: racing has a single round here, so no member can stop: {problems_key(config)}.n_train "
            f"({PROBLEMS['n_train']}) is within selection.first_slice ({RACE_PLAN.config.first_slice}) or one "
            f"answer block (engine.batch_size {ANSWER_BLOCK}, torch engine). Lower them, or use selection.mode full.",
            file=sys.stderr,
        )


def job_threads(gpu_stage=True):
    """A heavy stage's threads: on a local run every core given with --cores, or with --resources
    gpu=N a GPU job's share of them (cores x its GPUs / N, so that N / its GPUs jobs run side by side);
    on a cluster, the CPUs its job asks for (the same number at submission and inside the job)."""
    if not on_cluster():
        # every engine slot's job its share of the cores (one engine a device: a GPU group's share)
        if not gpu_stage:
            return workflow.cores
        groups = LOCAL_GPUS // job_gpus() if LOCAL_GPUS else 1
        return max(1, workflow.cores // (groups * ENGINES.per_device))
    gpus = job_gpus() if gpu_stage else 0
    r = config["resources"]
    return r["cpus_per_gpu"] * gpus if gpus else r["cpus_per_task"]


def job_resources(stage, gpu_stage=True):
    """The resources of a heavy stage's job, as the SLURM executor plugin names them: mem_mb and
    runtime (minutes) per stage; a GPU job adds gpu (count), gpu_model, cpus_per_gpu and nodes=1
    (tensor parallelism needs its GPUs on one node); a CPU job asks cpus_per_task."""
    r = config["resources"]
    res = {"mem_mb": r["mem_mb"][stage], "runtime": r["runtime"][stage]}
    gpus = job_gpus() if gpu_stage else 0
    if gpu_stage and SIDE_BY_SIDE:
        # a local run with engines side by side: jobs take engine slots (ENGINE_SLOTS of them), not GPUs
        return res | {"engine_slot": 1, "gpu": 0}
    if gpus:
        res |= {"gpu": gpus, "cpus_per_gpu": r["cpus_per_gpu"], "nodes": 1}
        if r["gpu_model"]:
            res["gpu_model"] = r["gpu_model"]
    else:
        res |= {"gpu": 0, "cpus_per_task": r["cpus_per_task"]}
    return res


def get_benchmarks():
    """RULE=PATH for every stage's Snakemake benchmark file, so the record can sum stage times. Called
    by rule record (rules/record.smk), after every rule it names is defined."""
    freeze = ("freeze_gsm8k", rules.freeze_gsm8k) if TASK == "gsm8k" else ("freeze_task", rules.freeze_task)
    pairs = [freeze, ("fetch_fineweb", rules.fetch_fineweb), ("prepare_model", rules.prepare_model)]
    paths = [f"{name}={rule.benchmark}" for name, rule in pairs]
    # every round's (distill.rounds): a stage's time in the record is the sum over the rounds
    for r in range(1, len(ROUND_KEYS) + 1):
        paths += [
            f"{name}={at_round(str(rule.benchmark), r)}"
            for name, rule in (
                ("rank", rules.rank),
                ("evaluate_members", rules.evaluate_members),
                ("vote", rules.vote),
                ("score_bpb", rules.score_bpb),
            )
        ]
        if r > 1:
            paths.append(f"round_base={at_round(str(rules.round_base.benchmark), r)}")
        if DISTILL_ENABLED:  # distillation's stages (rules/distill.smk): what distill.enabled adds to the run
            paths += distill_benchmarks(r)
        if not RACING:
            paths += [
                f"evaluate_shard={BENCH}/evaluate_shard/{ROUND_KEYS[r - 1]['eval']}/{stem}.tsv"
                for stem in POPULATION.shard_stems()
            ]
    if RACING:
        paths += [
            f"race_slice={BENCH}/race_slice/{KEYS['race']}/{stem}.tsv"
            for r in range(RACE_PLAN.rounds)
            for stem in race_chunk_stems(r)
        ]
    return paths


# distill.enabled (rules/distill.smk, docs/distill.md): its folders and knobs, and the helpers the record uses.
if DISTILL_ENABLED:
    from randopt.config import round_knobs
    from randopt.distill.lora import check_model_dir

    DISTILL_ARMS = ("distilled", "control")
    DISTILL_DATA = ROUND_PATTERN["distill_data"]
    DISTILL_TRAIN = ROUND_PATTERN["distill_train"]
    DISTILL_EVAL = ROUND_PATTERN["distill_eval"]
    # distill_train's device: the engine's, except that under vLLM (generation only) the fine-tune runs in
    # transformers on the GPU (and claims one: job_gpus counts the vLLM engine's).
    DISTILL_DEVICE = "cuda" if config["engine"]["kind"] == "vllm" else config["engine"]["device"]

    # At DAG build: a LoRA target module the model lacks (read from config.json, no weights) is an error now,
    # not after the search; each round's targets (a later round's model has round 1's modules). A model not
    # prepared yet is checked when distill_train loads it.
    try:
        for r in range(1, len(ROUND_KEYS) + 1):
            check_model_dir(
                config["model"]["path"] if config["model"]["source"] == "local" else f"{MODEL}/model",
                round_knobs(config, r)["lora"]["target_modules"],
            )
    except InputError as err:
        raise WorkflowError(f"invalid config: {err}")

    # Its GPU jobs (vLLM, or torch on cuda) hold no resident engine: each claims its GPU as an engine stage
    # does (--gpu-slots) and stops the resident engines on it first (--release-resident: their memory is
    # its own engine's, or its fine-tune's); with engines side by side it takes every engine slot, so
    # that none of those engines is serving a job. On the CPU none of this applies.
    DISTILL_LOCAL = (f" --gpu-slots {LOCAL_GPUS} --gpu-lock-dir .snakemake/gpu-locks" if LOCAL_GPUS else "") + (
        f" --release-resident --resident-dir {RESIDENT_DIR}" if KEEP_LOADED_S and job_gpus() else ""
    )

    def distill_resources():
        res = job_resources("evaluate_members")
        return res | ({"engine_slot": ENGINE_SLOTS} if "engine_slot" in res else {})

    def distill_knob(name):
        """A param function: the job's round's distill knob (randopt/config.py round_knobs); a block as one
        shell word of JSON."""

        def knob(wildcards):
            value = round_knobs(config, round_of(wildcards))[name]
            return q(value) if isinstance(value, dict) else value

        return knob

    def distill_benchmarks(r):
        """RULE=PATH of round r's distillation benchmark files, for the record's stage times (get_benchmarks)."""
        return (
            [f"distill_data={at_round(str(rules.distill_data.benchmark), r)}"]
            + [
                f"distill_train={at_round(str(rules.distill_train.benchmark), r).replace('{arm}', arm)}"
                for arm in DISTILL_ARMS
            ]
            + [
                f"evaluate_distilled={at_round(str(rules.evaluate_distilled.benchmark), r).replace('{arm}', arm)}"
                for arm in DISTILL_ARMS
            ]
        )

    def distill_record_inputs():
        """What the record reads of distillation, every round's: the datasets' manifest, each arm's model
        manifest and result, and the round's base model manifest, vote and bpb."""
        return {f"distill_round{r}": distill_round_files(r) for r in range(1, len(ROUND_KEYS) + 1)}

    def distill_round_files(r):
        """Round r's files the record reads, in the order of randopt/stages/record.py --distill-round."""
        paths = ROUND_PATHS[r - 1]
        return (
            [
                f"{paths['model']}/manifest.json",
                f"{paths['vote']}/vote.json",
                f"{paths['bpb']}/{ROUND_KEYS[r - 1]['eval']}/{KEYS['population']}/bpb.json",
                f"{paths['distill_data']}/manifest.json",
            ]
            + [f"{paths['distill_train']}/{arm}/manifest.json" for arm in DISTILL_ARMS]
            + [f"{paths['distill_eval']}/{arm}/result.json" for arm in DISTILL_ARMS]
        )
