"""Whether a run's engines share their GPUs under CUDA MPS (engine.cuda_mps), and why.

Without MPS the engines side by side on one GPU (engine.engines_per_gpu) take turns on it: the driver
time-slices processes, so the small kernels of a small model's decode steps never run at once, and a
GPU "96 % busy" with three SmolLM2 engines still leaves most of its SMs idle. Under MPS (NVIDIA's
Multi-Process Service: one server process owns the GPU and runs every client's kernels in one context)
kernels of different engines run side by side. Measured on one H200 with vLLM 0.25 (SmolLM2, 128 GSM8K
prompts x 512 tokens; bench/engines_per_gpu/README.md, "Engines under CUDA MPS"): three engines gave
2.26x one engine's members/s under MPS against 1.54x time-sliced (1.47x), four 2.36x; the answers were
identical. So `auto` uses MPS wherever a run puts more than one engine on a GPU and can: a local run
(on a cluster every job is one engine on its own GPU), a GPU engine, the control binary on PATH, and no
GPU whose compute mode is Prohibited. true insists (each missing piece is an error at DAG build, with
its fix); false never starts a daemon.

It never changes a result (not in any key): MPS changes where kernels run, not what they compute.
randopt/runtime/mps_daemon.py starts and stops the daemon the run's engines use.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

CONTROL = "nvidia-cuda-mps-control"   # NVIDIA's MPS control program (the driver's compute utilities)
PIPE_ENV = "CUDA_MPS_PIPE_DIRECTORY"  # where a CUDA client looks for the control daemon


@dataclass(frozen=True)
class MpsChoice:
    """Whether this run may put its engines under MPS (`possible`), and why; the run then uses it where
    it puts more than one engine on a GPU (auto) or always (true): `enabled(engines_per_gpu)`."""
    requested: object          # engine.cuda_mps: "auto", True or False
    possible: bool
    why: str
    external: str | None = None   # a daemon the caller started (its CUDA_MPS_PIPE_DIRECTORY): used, not ours

    def enabled(self, engines_per_gpu: int) -> bool:
        return self.possible and (self.requested is True or engines_per_gpu > 1)

    def as_record(self, engines_per_gpu: int) -> dict:
        on = self.enabled(engines_per_gpu)
        why = self.why if on or not self.possible else \
            f"auto: {engines_per_gpu} engine a GPU has no other engine to share it with"
        return {"cuda_mps": on, "cuda_mps_why": why}


def compute_modes() -> list[str] | None:
    """Each local GPU's compute mode as nvidia-smi names it (Default, Exclusive_Process, Prohibited), or
    None when nvidia-smi is not here or does not answer (then the daemon's start is the check)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run([smi, "--query-gpu=compute_mode", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return [line.strip() for line in out.stdout.splitlines() if line.strip()] if out.returncode == 0 else None


def resolve(requested, *, gpus_per_engine: int, on_cluster: bool, binary: str | None = None,
            modes: list[str] | None = None, env=None) -> MpsChoice:
    """engine.cuda_mps for one run. gpus_per_engine: 0 for a CPU engine; binary: the control program's
    path (shutil.which's when not given); modes: the GPUs' compute modes (compute_modes() when not given);
    env: the caller's environment (a daemon it started is used as it is). Raises ValueError, naming the
    key and the fix, where true cannot be honoured."""
    if requested not in ("auto", True, False):
        raise ValueError(f"engine.cuda_mps is {requested!r}; use auto, true or false")
    if requested is False:
        return MpsChoice(False, False, "engine.cuda_mps: false")
    insist = requested is True

    def refuse(why: str, fix: str) -> MpsChoice:
        if insist:
            raise ValueError(f"engine.cuda_mps is true, but {why}: {fix}, or set engine.cuda_mps to auto or false")
        return MpsChoice(requested, False, f"auto: {why}")

    if on_cluster:
        return refuse("on a cluster the run starts no MPS daemon (a job's engines side by side take turns on its "
                      "GPU, time-sliced)", "run locally with --resources gpu=N and engine.engines_per_gpu above 1")
    if not gpus_per_engine:
        return refuse("the engine runs on the CPU (MPS shares a GPU)", "use a GPU engine (engine.kind vllm)")
    env = os.environ if env is None else env
    if env.get(PIPE_ENV):
        return MpsChoice(requested, True, f"a daemon the caller started ({PIPE_ENV}={env[PIPE_ENV]}) serves the "
                                          f"engines; the run starts none", external=env[PIPE_ENV])
    binary = shutil.which(CONTROL) if binary is None else binary
    if not binary:
        return refuse(f"{CONTROL} is not on PATH", "install the NVIDIA driver's compute utilities or add their "
                                                   "folder to PATH")
    modes = compute_modes() if modes is None else modes
    if modes and "Prohibited" in modes:
        return refuse(f"a GPU's compute mode is Prohibited (nvidia-smi: {', '.join(modes)}): no process may use it",
                      "ask the machine's admin for Default or Exclusive_Process (nvidia-smi -c)")
    return MpsChoice(requested, True, ("engine.cuda_mps: true" if insist else "auto") +
                     f": the run's engines share each GPU under a CUDA MPS daemon of its own ({binary})")
