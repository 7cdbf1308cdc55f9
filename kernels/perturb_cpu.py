"""The CPU kernel of the absolute reconstruct: numpy only, bit-identical to kernels/noise_ref.py.

Why not torch ops on the CPU: the reference works in 64K-element chunks (so the hash stays in L2),
and every small torch op there is an OpenMP parallel region. Alone that is fine; with another
process on the same cores (CI, Snakemake running two jobs), each region's barrier waits for a
descheduled thread and one seed switch of a 135M model went from 1.5 s to 80 s (measured). numpy
ufuncs run on the calling thread and release the GIL, so this kernel parallelises explicitly over
large blocks with a thread pool instead, and degrades gracefully when cores are shared.

bf16 has no numpy dtype: its bits are the top half of an fp32, so widening is a shift, and rounding
to nearest even is done by hand on the fp32 bits (the same rule as torch's .to(bfloat16)).
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from kernels.noise_ref import _fmix32_np_, tensor_keys

CHUNK = 1 << 16        # elements per inner step: the uint32 hash buffer stays in L2
BLOCK = 1 << 22        # elements per thread-pool task

_NUMPY_DTYPES = {torch.float16: np.float16, torch.float32: np.float32}


def _bits_view(t: torch.Tensor) -> np.ndarray:
    """A zero-copy numpy view of a contiguous CPU tensor's storage (bf16 as uint16 bits)."""
    flat = t.view(-1)
    if t.dtype == torch.bfloat16:
        return flat.view(torch.int16).numpy().view(np.uint16)
    return flat.numpy()


def _steps(start: int, stop: int, ka: int, kb: int, sigma32: np.float32) -> np.ndarray:
    """+sigma or -sigma (float32) for logical indices start..stop-1."""
    h = np.arange(start, stop, dtype=np.uint32)
    h ^= np.uint32(ka)
    _fmix32_np_(h)
    h ^= np.uint32(kb)
    _fmix32_np_(h)
    negative = (h >> np.uint32(31)).astype(np.bool_)
    return np.where(negative, -sigma32, sigma32)


def _round_fp32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    u = x.view(np.uint32)
    return ((u + (np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1)))) >> np.uint32(16)).astype(np.uint16)


def _block(live: np.ndarray, base: np.ndarray, is_bf16: bool, start: int, stop: int, ka: int, kb: int,
           sigma32: np.float32) -> None:
    for a in range(start, stop, CHUNK):
        b = min(stop, a + CHUNK)
        step = _steps(a, b, ka, kb, sigma32)
        if is_bf16:
            w = (base[a:b].astype(np.uint32) << np.uint32(16)).view(np.float32)
            w += step
            live[a:b] = _round_fp32_to_bf16_bits(w)
        else:
            w = base[a:b].astype(np.float32)
            w += step
            live[a:b] = w.astype(live.dtype)  # numpy rounds to nearest even, as torch does


def reconstruct_many_cpu_(items, sigma: float, seed: int, threads: int | None = None) -> None:
    """live := base + sigma * R(seed, name) for (name, live, base) CPU tensors, over a thread pool."""
    sigma32 = np.float32(sigma)
    tasks = []
    for name, live, base in items:
        if live.dtype not in (torch.bfloat16, *_NUMPY_DTYPES) or not (live.is_contiguous() and base.is_contiguous()):
            raise ValueError(f"{name}: CPU kernel needs contiguous bf16/fp16/fp32 tensors")
        n = base.numel()
        if n >= 2**32:
            raise ValueError(f"{name}: {n} elements; the noise index is 32-bit")
        ka, kb = tensor_keys(seed, name)
        lv, bv = _bits_view(live), _bits_view(base)
        for start in range(0, n, BLOCK):
            tasks.append((lv, bv, live.dtype == torch.bfloat16, start, min(n, start + BLOCK), ka, kb, sigma32))
    workers = max(1, threads or torch.get_num_threads() or os.cpu_count() or 1)
    if workers == 1 or len(tasks) == 1:
        for task in tasks:
            _block(*task)
        return
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for future in [pool.submit(_block, *task) for task in tasks]:
            future.result()
