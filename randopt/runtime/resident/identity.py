"""Which engine a resident server holds, and on which device: a server is reused only by a job whose
engine would be the same (engine_key), one per GPU (overlaps), and only under the reconstruct switch
(uses_resident)."""
from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

from randopt.io import canonical_json

# Environment variables that can change an engine's numbers or devices: part of the key.
ENV_PREFIXES = ("CUDA_", "ONEDNN_", "DNNL_", "ATEN_", "OMP_", "KMP_", "GOMP_", "MKL_", "OPENBLAS_", "TORCH",
                "PYTORCH_", "TRITON_", "VLLM_", "NCCL_", "NVIDIA_", "CUBLAS_", "HF_", "TRANSFORMERS_", "LD_")
# Packages whose version changes what an engine computes: part of the key.
PACKAGES = ("torch", "transformers", "vllm", "triton", "safetensors")


def device_name() -> str:
    """The device a job's engine runs on, as a file name: gpu<ids> for the GPUs this job may see
    (randopt/runtime/gpu_slots.py set CUDA_VISIBLE_DEVICES to its claim; ids that are no plain numbers, such as
    UUIDs, as gpu-<hash>), else cpu (CUDA_VISIBLE_DEVICES unset: the CPU, or every GPU)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").replace(" ", "").strip(",")
    if not visible:
        return "cpu"
    ids = visible.split(",")
    if all(i.isdigit() for i in ids):
        return "gpu" + "-".join(ids)
    return "gpu-" + hashlib.sha1(visible.encode()).hexdigest()[:12]


def _gpu_ids(device: str) -> set[str] | None:
    """The GPU ids a device name covers; None: possibly every GPU (cpu, or ids given as UUIDs)."""
    if device == "cpu" or device.startswith("gpu-"):
        return None
    return set(device.removeprefix("gpu").split("-"))


def overlaps(device: str, other: str) -> bool:
    """Whether two devices may share a GPU (then only one of them may hold a resident engine)."""
    a, b = _gpu_ids(device), _gpu_ids(other)
    return a is None or b is None or bool(a & b)


def _versions() -> dict:
    from importlib import metadata
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def engine_key(kind: str, model_dir: str, options: dict) -> str:
    """What decides the engine a job would load: a server with another key is never reused."""
    from randopt.code_keys import modules_version

    model = Path(model_dir).resolve()
    files = sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in model.iterdir() if p.is_file()) \
        if model.is_dir() else []
    env = {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIXES)}
    spec = {"kind": kind, "model": str(model), "files": files, "options": options, "env": env,
            "python": sys.executable, "packages": _versions(), "code": modules_version("randopt.engines")}
    return hashlib.sha256(canonical_json(spec).encode()).hexdigest()[:16]


def uses_resident(options: dict) -> tuple[bool, str]:
    """(whether this engine may be resident, why not): only the reconstruct switch's weights are
    independent of the members served before."""
    if options.get("switch", "reconstruct") != "reconstruct":
        return False, "perturbation.switch delta: its weights depend on the walk, so each job loads its own engine"
    return True, ""
