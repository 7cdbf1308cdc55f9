"""A GPU job that builds no engine (distill_train's fine-tune): its flags, and its GPU claimed as an engine
stage's is (randopt/runtime/gpu_slots.py), with the resident engines on it stopped first, since the job
needs the memory they hold (randopt/runtime/resident/). Neither changes what the job computes."""
from __future__ import annotations

import argparse

from randopt.runtime import resident
from randopt.runtime.gpu_slots import DEFAULT_LOCK_DIR, assign_gpus

FLAGS = ("gpu_slots", "gpu_lock_dir", "gpu_wait", "release_resident", "resident_dir")


def add_gpu_job_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gpu-slots", type=int, default=None, metavar="N", help="as an engine stage's: claim one of N GPUs")
    p.add_argument("--gpu-lock-dir", default=DEFAULT_LOCK_DIR, help="lock files of --gpu-slots (one per GPU)")
    p.add_argument("--gpu-wait", type=float, default=600.0, help="seconds to wait for a free GPU")
    p.add_argument("--release-resident", action="store_true",
                   help="stop the resident engines on this job's GPU first (their memory is the job's)")
    p.add_argument("--resident-dir", default=resident.DEFAULT_DIR, help="where the resident engines are")


def claim_gpu(args, device: str) -> dict:
    """Before CUDA starts: one GPU of --gpu-slots for a CUDA device, then the resident engines on it
    stopped (--release-resident). Returns the other arguments (FLAGS left out), for the stage."""
    assign_gpus("torch", {"device": device}, args.gpu_slots, args.gpu_lock_dir, timeout=args.gpu_wait)
    if args.release_resident:
        resident.release(args.resident_dir)
    return {k: v for k, v in vars(args).items() if k not in FLAGS}
