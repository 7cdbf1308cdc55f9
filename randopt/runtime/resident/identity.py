"""Which engine a resident server holds, and on which device: a server is reused only by a job whose
engine would be the same (engine_key), one per GPU (overlaps), and only under the reconstruct switch
(uses_resident)."""
from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

from randopt.io import canonical_json
from randopt.runtime.gpu_slots import SLOT_ENV

# Environment variables that can change an engine's numbers or devices: part of the key.
ENV_PREFIXES = ("CUDA_", "ONEDNN_", "DNNL_", "ATEN_", "OMP_", "KMP_", "GOMP_", "MKL_", "OPENBLAS_", "TORCH",
                "PYTORCH_", "TRITON_", "VLLM_", "NCCL_", "NVIDIA_", "CUBLAS_", "HF_", "TRANSFORMERS_", "LD_")
# Packages whose version changes what an engine computes: part of the key.
PACKAGES = ("torch", "transformers", "vllm", "triton", "safetensors")


def device_name(slot: str | None = None) -> str:
    """The device a job's engine runs on, as a file name: gpu<ids> for the GPUs this job may see
    (randopt/runtime/gpu_slots.py set CUDA_VISIBLE_DEVICES to its claim; ids that are no plain numbers, such as
    UUIDs, as gpu-<hash>), else cpu (CUDA_VISIBLE_DEVICES unset: the CPU, or every GPU); with engines side
    by side (engine.engines_per_gpu), the slot too: gpu0.e1of3 is the second of three engines on GPU 0.
    slot ("<s>of<E>") names one for this process's own engines side by side (job_engines.py); by default the
    one the job claimed (gpu_slots.py)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").replace(" ", "").strip(",")
    if not visible:
        name = "cpu"
    elif all(i.isdigit() for i in visible.split(",")):
        name = "gpu" + "-".join(visible.split(","))
    else:
        name = "gpu-" + hashlib.sha1(visible.encode()).hexdigest()[:12]
    slot = slot or os.environ.get(SLOT_ENV)
    return f"{name}.e{slot}" if slot else name


def _parts(device: str) -> tuple[str, str | None]:
    """(the device without its slot, the slot "<s>of<E>" or None)."""
    base, _, slot = device.partition(".e")
    return base, slot or None


def _gpu_ids(device: str) -> set[str] | None:
    """The GPU ids a device name covers; None: possibly every GPU (cpu, or ids given as UUIDs)."""
    base = _parts(device)[0]
    if base == "cpu" or base.startswith("gpu-"):
        return None
    return set(base.removeprefix("gpu").split("-"))


def overlaps(device: str, other: str) -> bool:
    """Whether two devices' engines may not both hold memory on a GPU (then only one of them may hold
    a resident engine): they share a GPU, unless they are two slots of the same layout (the same
    GPUs, as many engines) meant to run side by side."""
    (base, slot), (other_base, other_slot) = _parts(device), _parts(other)
    if slot and other_slot and base == other_base and slot != other_slot \
            and slot.split("of")[1] == other_slot.split("of")[1]:
        return False
    a, b = _gpu_ids(device), _gpu_ids(other)
    return a is None or b is None or bool(a & b)


def physical_devices(device: str) -> list[str]:
    """The physical devices an engine on `device` uses, for the start lock: gpu<i> each, or cpu."""
    ids = _gpu_ids(device)
    return [f"gpu{i}" for i in sorted(ids)] if ids else [_parts(device)[0]]


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
    """What decides the engine a job would load: a server with another key is never reused. The model
    enters by the bytes of its files (randopt/model/served.py, which also checks them against the
    prepared model's manifest), never by names, sizes or mtimes: weights edited in place with their
    mtime put back key another engine, or are refused."""
    from randopt.code_keys import modules_version
    from randopt.model.served import served_sha256

    model = Path(model_dir).resolve()
    env = {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIXES)}
    spec = {"kind": kind, "model": str(model), "served_sha256": served_sha256(model), "options": options, "env": env,
            "python": sys.executable, "packages": _versions(), "code": modules_version("randopt.engines")}
    return hashlib.sha256(canonical_json(spec).encode()).hexdigest()[:16]


def uses_resident(options: dict) -> tuple[bool, str]:
    """(whether this engine may be resident, why not): only the reconstruct switch's weights are
    independent of the members served before."""
    if options.get("switch", "reconstruct") != "reconstruct":
        return False, "perturbation.switch delta: its weights depend on the walk, so each job loads its own engine"
    return True, ""
