# Engines on this host (included by rules/common.smk before the run's keys, since selection.mode auto is decided
# from the engine layout): cluster or local, GPUs a job takes, CUDA MPS, engines side by side on a device
# (engine.engines_per_gpu; randopt/runtime/engine_slots.py), the engine slots jobs are scheduled over, and the
# flags the engine stages get for sharing this host.


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
