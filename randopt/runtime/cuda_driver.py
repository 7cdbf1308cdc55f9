"""Whether this host has CUDA, asked without torch where it cannot have it.

torch.cuda needs the CUDA driver's library, libcuda.so.1. A process that only wants GPU 0's name or memory
(a DAG build planning a vLLM run, the record naming the hardware) would otherwise import torch for the
answer "none": ~2 s of a small CPU at every DAG build and every record, on every laptop, login node and CI
runner. Without the library the answer is known at once; with it, torch reads the cards as before."""
from __future__ import annotations

import ctypes


def present() -> bool:
    """Whether the CUDA driver's library loads on this host (without it no CUDA is usable)."""
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


def cuda_torch():
    """torch where CUDA is usable on this host, else None; torch is imported only where the driver is."""
    if not present():
        return None
    try:
        import torch
        return torch if torch.cuda.is_available() else None
    except Exception:  # a broken driver or a CPU-only torch: no usable CUDA, as torch itself would say
        return None


def gpu_names() -> list[str]:
    """The names torch gives this host's CUDA devices, in order; [] without a usable CUDA."""
    torch = cuda_torch()
    return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if torch else []
