"""This host's CUDA devices, asked of the CUDA driver itself, never through torch.

A process that only wants the cards' names or memory (a DAG build planning a vLLM run, the record naming the
hardware) would otherwise import torch for it: ~2 s of a small CPU for the answer "none" at every DAG build and
record on a laptop, login node or CI runner, and on a GPU host torch's import and CUDA start before the first
job. The driver's own API (libcuda.so.1: cuInit, cuDeviceGetCount, cuDeviceGetName, cuDeviceTotalMem) answers
the same questions in one load: the devices torch would see, in its order (CUDA_VISIBLE_DEVICES and
CUDA_DEVICE_ORDER are the driver's to apply), each with the name torch.cuda.get_device_name gives and the bytes
of torch.cuda.get_device_properties(i).total_memory. No context is created, so no GPU memory is taken and no
MPS client starts. Without the library, or where the driver does not initialize, there is no usable CUDA.
On a real driver (an H100, driver 580.159.04, 2026-12-07; bench/real_model/README.md) it gave torch's name and
bytes in 0.35 s a fresh process, where torch's import and CUDA start took 4.6-5.6 s."""
from __future__ import annotations

import ctypes
from functools import cache

_NAME_BYTES = 256   # cuDeviceGetName's buffer: device names are far shorter


def _load():
    """libcuda.so.1, or None where this host has no CUDA driver (then no CUDA is usable)."""
    try:
        return ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None


@cache
def devices() -> tuple[tuple[str, int], ...]:
    """(name, total memory in bytes) of each CUDA device this process sees, in CUDA's order; () where there is no
    usable CUDA (no driver, a driver that does not initialize, or no device visible). Asked once a process."""
    cuda = _load()
    if cuda is None or cuda.cuInit(0) != 0:
        return ()
    count = ctypes.c_int(0)
    if cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return ()
    found = []
    for ordinal in range(count.value):
        device, name, total = ctypes.c_int(0), ctypes.create_string_buffer(_NAME_BYTES), ctypes.c_size_t(0)
        if (cuda.cuDeviceGet(ctypes.byref(device), ordinal) != 0
                or cuda.cuDeviceGetName(name, _NAME_BYTES, device) != 0
                or cuda.cuDeviceTotalMem_v2(ctypes.byref(total), device) != 0):
            return ()   # a device the driver lists but cannot describe: as torch, count no usable CUDA
        found.append((name.value.decode(errors="replace"), total.value))
    return tuple(found)


def gpu_names() -> list[str]:
    """The names of this host's CUDA devices, in order; [] without a usable CUDA."""
    return [name for name, _ in devices()]


def gpu0() -> tuple[str | None, int | None]:
    """GPU 0's name and memory in bytes; (None, None) without a usable CUDA."""
    return devices()[0] if devices() else (None, None)
