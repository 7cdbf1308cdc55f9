"""The engine flags that every engine stage's CLI shares (evaluate_shard, evaluate_members, score_bpb),
and the engine they make. Under randopt/runtime/, which no code key hashes (randopt/code_keys.py): these
flags say where and how an engine runs (GPU slots, resident engines, CUDA MPS), never what it computes;
the engine it builds (randopt/engines/) is keyed."""
from __future__ import annotations

import argparse
import os

from randopt.block_files import object_block
from randopt.runtime.log import log
from randopt.schema import check_engine_options
from randopt.runtime import resident
from randopt.engines.base import Engine
from randopt.engines.factory import make_engine, track
from randopt.runtime.gpu_slots import DEFAULT_LOCK_DIR, assign_gpus
from randopt.runtime import mps_daemon
from randopt.runtime.job_engines import engine_makers


def add_engine_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model-dir", required=True)
    p.add_argument("--engine", default="torch", choices=["torch", "vllm"])
    p.add_argument("--engine-options-file", dest="engine_options", type=object_block, default={},
                   help="a JSON file holding the engine's options: device, batch_size, ... (randopt/block_files.py); "
                        "none: the defaults")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--gpu-slots", type=int, default=None, metavar="N",
                   help="share N GPUs of this host with other jobs: claim this engine's GPUs (tensor_parallel_size, "
                        "or 1 for torch on cuda) as an aligned free group and set CUDA_VISIBLE_DEVICES to it "
                        "(nothing when CUDA_VISIBLE_DEVICES is set already); the workflow passes it on a local "
                        "run with --resources gpu=N")
    p.add_argument("--gpu-lock-dir", default=DEFAULT_LOCK_DIR, help="lock files of --gpu-slots (one per GPU)")
    p.add_argument("--gpu-wait", type=float, default=600.0, help="seconds to wait for a free GPU group")
    p.add_argument("--engines-per-gpu", type=int, default=1, metavar="E",
                   help="engines side by side on each GPU group (or the CPU): claim one of its E engine slots "
                        "(randopt/plan/engine_slots.py); the workflow passes engine.engines_per_gpu on a local run")
    p.add_argument("--keep-loaded-s", type=float, default=0.0, metavar="S",
                   help="use this device's resident engine (randopt/runtime/resident/), started if there is none, and keep "
                        "it loaded S idle seconds for the next job; 0: load an engine for this job only. The workflow "
                        "passes engine.keep_loaded_s on a local run")
    p.add_argument("--resident-dir", default=resident.DEFAULT_DIR, help="sockets and logs of --keep-loaded-s")
    p.add_argument("--cuda-mps-dir", default=None, metavar="DIR",
                   help="make the engine a client of the run's CUDA MPS daemon in DIR (randopt/runtime/mps_daemon.py), "
                        "which must be up; the workflow passes it on a local GPU run under engine.cuda_mps")
    p.add_argument("--engines-in-job", type=int, default=1, metavar="N",
                   help="N engines side by side inside this job, each a server of the job's own on its device, "
                        "stopped when it ends (randopt/runtime/job_engines.py); the workflow passes "
                        "engine.engines_per_gpu on a cluster, where nothing outlives a job")
    p.add_argument("--release-resident", action="store_true",
                   help="before loading this job's own engine, stop the resident engines on its GPUs (in --resident-dir), "
                        "whose memory it needs; the workflow passes it to distillation's GPU jobs")


# The dests add_engine_args adds: what the engine is made from, never a stage's own argument.
ENGINE_FLAGS = ("model_dir", "engine", "engine_options", "threads", "gpu_slots", "gpu_lock_dir", "gpu_wait",
                "engines_per_gpu", "keep_loaded_s", "resident_dir", "cuda_mps_dir", "engines_in_job",
                "release_resident")


def stage_kwargs(args) -> dict:
    """The parsed arguments but the engine's (ENGINE_FLAGS): the stage's run() takes them as keywords."""
    return {k: v for k, v in vars(args).items() if k not in ENGINE_FLAGS}


def engine_makers_from_args(args) -> list:
    """The job's engine makers: one (engine_from_args), or --engines-in-job servers of the job's own on its
    device, sharing its threads (torch) or its card (vLLM's gpu_memory_utilization auto)."""
    n = args.engines_in_job
    if n < 1:
        raise ValueError(f"--engines-in-job must be >= 1, got {n}")
    if n == 1:
        return [lambda: engine_from_args(args)]
    if args.keep_loaded_s > 0 or args.engines_per_gpu > 1:
        raise ValueError("--engines-in-job runs a job's own engines: not with --keep-loaded-s or --engines-per-gpu, "
                         "which share the run's resident engines between jobs")
    shareable, why = resident.uses_resident(check_engine_options(args.engine_options))
    if not shareable:   # each engine's walk would depend on which members it served, so on N
        log.info("one engine in this job, not %d: %s", n, why)
        return [lambda: engine_from_args(args)]
    options = job_options(args)
    if args.engine == "torch" and args.threads:
        options["threads"] = max(1, args.threads // n)
    if args.engine == "vllm":
        options["engines_per_gpu"] = n  # gpu_memory_utilization auto splits the card
    return engine_makers(args.engine, args.model_dir, options, n, track)


def job_options(args) -> dict:
    """The engine options, checked, with the job's GPUs claimed and its MPS client set: before any engine."""
    # The schema's definitions.engine_options: an unknown or mistyped option is an error naming it,
    # before any GPU is claimed or model loaded.
    options = check_engine_options(args.engine_options)
    # Before the engine, so that CUDA (in this process and in vLLM's) sees only the claimed GPUs.
    if args.engines_per_gpu < 1:
        raise ValueError(f"--engines-per-gpu must be >= 1, got {args.engines_per_gpu}")
    assign_gpus(args.engine, options, args.gpu_slots, args.gpu_lock_dir, timeout=args.gpu_wait,
                engines_per_gpu=args.engines_per_gpu)
    if args.cuda_mps_dir:  # inherited by a resident server this job starts (and part of its key: CUDA_*)
        os.environ.update(mps_daemon.client_env(args.cuda_mps_dir))
        log.info("CUDA MPS: the engine is a client of the run's daemon (%s)", os.environ["CUDA_MPS_PIPE_DIRECTORY"])
    return options


def engine_from_args(args) -> Engine:
    options = job_options(args)
    if args.engine == "torch" and args.threads:
        options["threads"] = args.threads
    if args.engine == "vllm" and args.engines_per_gpu > 1:
        options["engines_per_gpu"] = args.engines_per_gpu  # gpu_memory_utilization auto splits the card
    if args.release_resident:
        resident.release(args.resident_dir)
    if args.keep_loaded_s > 0:
        shareable, why = resident.uses_resident(options)
        if shareable:
            return track(resident.connect(args.engine, args.model_dir, options, args.resident_dir, args.keep_loaded_s))
        log.info("no resident engine: %s", why)
    return make_engine(args.engine, args.model_dir, **options)


def engine_compute_dtype(engine: Engine) -> dict:
    """What the engine computed in and why, for the stage's timings and so the record."""
    dtype = getattr(engine, "compute_dtype", None)
    return {"dtype": str(dtype).removeprefix("torch.") if dtype is not None else None,
            "why": getattr(engine, "compute_dtype_reason", None)}
