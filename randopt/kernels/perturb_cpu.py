"""The CPU kernel of the absolute reconstruct: numpy only, bit-identical to randopt/kernels/noise_ref.py.

Why not torch ops on the CPU: the reference works in 64K-element chunks (so the hash stays in L2),
and every small torch op there is an OpenMP parallel region. Alone that is fine; with another
process on the same cores (CI, Snakemake running two jobs), each region's barrier waits for a
descheduled thread and one seed switch of a 135M model went from 1.5 s to 80 s (measured). numpy
ufuncs run on the calling thread and release the GIL, so this kernel parallelises explicitly over
large blocks with a thread pool instead, and degrades gracefully when cores are shared.

bf16 has no numpy dtype: its bits are the top half of an fp32, so widening is a shift, and rounding
to nearest even is done by hand on the fp32 bits (the same rule as torch's .to(bfloat16)).

With numba installed (it is in envs/), each block runs as one compiled loop instead of ~30 numpy
passes over a chunk: hash, add and round per element, the same integer steps, so the same bits
(tests/test_kernel_noise.py checks both paths against the reference). It releases the GIL and runs
on the same thread pool, so it degrades the same way when cores are shared. Measured on a 2-core
AMD EPYC, SmolLM2-135M in bf16: a switch went from ~0.9 s (numpy) to ~0.2 s (bench/cpu_default/cpu_default.py).

Gaussian noise (noise="gaussian") is the same loop with a table read: the hash's top 16 bits pick
+-T[k] (randopt/kernels/noise_ref.py), the product sigma*G is rounded to fp32, then added to the fp32 base.
Neither numpy (two ufuncs) nor numba (no fastmath: LLVM gets a separate fmul and fadd, which it may
not contract) fuses them into an FMA, so the bits are the reference's (tests/test_kernel_gaussian.py
checks both paths, and that a fused computation would differ). Its cost against Rademacher and the
copy floor: bench/perturb/README.md.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from randopt.kernels.noise_kinds import GAUSSIAN, RADEMACHER, check_kind
from randopt.kernels.noise_ref import _fmix32_np_, gaussian_bits_of_hash, gaussian_table, tensor_keys

CHUNK = 1 << 16        # elements per inner step: the uint32 hash buffer stays in L2
BLOCK = 1 << 22        # elements per thread-pool task

_NUMPY_DTYPES = {torch.float16: np.float16, torch.float32: np.float32}


def _bits_view(t: torch.Tensor) -> np.ndarray:
    """A zero-copy numpy view of a contiguous CPU tensor's storage (bf16 as uint16 bits)."""
    flat = t.view(-1)
    if t.dtype == torch.bfloat16:
        return flat.view(torch.int16).numpy().view(np.uint16)
    return flat.numpy()


def _steps(start: int, stop: int, ka: int, kb: int, sigma32: np.float32, gauss: bool) -> np.ndarray:
    """rn32(sigma * N) (float32) for logical indices start..stop-1: +-sigma, or sigma * G."""
    h = np.arange(start, stop, dtype=np.uint32)
    h ^= np.uint32(ka)
    _fmix32_np_(h)
    h ^= np.uint32(kb)
    _fmix32_np_(h)
    if gauss:
        return gaussian_bits_of_hash(h).view(np.float32) * sigma32  # one fp32 multiply, rounded
    negative = (h >> np.uint32(31)).astype(np.bool_)
    return np.where(negative, -sigma32, sigma32)


def _round_fp32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    u = x.view(np.uint32)
    return ((u + (np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1)))) >> np.uint32(16)).astype(np.uint16)


def _block_numpy(live: np.ndarray, base: np.ndarray, is_bf16: bool, start: int, stop: int, ka: int, kb: int,
                 sigma32: np.float32, gauss: bool) -> None:
    for a in range(start, stop, CHUNK):
        b = min(stop, a + CHUNK)
        step = _steps(a, b, ka, kb, sigma32, gauss)
        if is_bf16:
            w = (base[a:b].astype(np.uint32) << np.uint32(16)).view(np.float32)
            w += step
            live[a:b] = _round_fp32_to_bf16_bits(w)
        else:
            w = base[a:b].astype(np.float32)
            w += step
            live[a:b] = w.astype(live.dtype)  # numpy rounds to nearest even, as torch does


def _compile_numba():
    """The fused per-element loop, or None without numba. cache=True keeps the compiled code beside
    this file (__pycache__), so a stage process does not pay the ~2 s compile again."""
    try:
        import numba
    except ImportError:
        return None

    # numba widens small integers to 64 bits in arithmetic, so the mod-2**32 wrap is an explicit mask.
    @numba.njit(nogil=True, cache=True, inline="always")
    def fmix32(h):
        h ^= h >> 16
        h = (h * 0x85EBCA6B) & 0xFFFFFFFF
        h ^= h >> 13
        h = (h * 0xC2B2AE35) & 0xFFFFFFFF
        h ^= h >> 16
        return h

    @numba.njit(nogil=True, cache=True)
    def block_bf16(live, base, start, stop, ka, kb, sigma32):
        # wide / out: one fp32 and its bits (numba has no scalar bit cast; a 1-element view is one)
        wide = np.empty(1, np.float32)
        bits = wide.view(np.uint32)
        for i in range(start, stop):
            h = fmix32(fmix32(np.uint64(i) ^ ka) ^ kb)
            bits[0] = np.uint32(base[i]) << np.uint32(16)
            wide[0] = wide[0] + (-sigma32 if h >> 31 else sigma32)
            u = bits[0]
            live[i] = np.uint16((u + (np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1)))) >> np.uint32(16))

    @numba.njit(nogil=True, cache=True)
    def block_fp32(live, base, start, stop, ka, kb, sigma32):
        for i in range(start, stop):
            h = fmix32(fmix32(np.uint64(i) ^ ka) ^ kb)
            live[i] = base[i] + (-sigma32 if h >> 31 else sigma32)

    # Gaussian: sigma32 * T[k] is a float32 multiply (both operands float32), negated when bit 31 of h
    # is set. Negating the rounded product is the definition's rn32(sigma * -T[k]) exactly (rounding to
    # nearest even is symmetric in sign), and it spares the bit cast of G through memory (1.3x
    # Rademacher's loop on a 4M-element block instead of 1.7x, measured).
    @numba.njit(nogil=True, cache=True, inline="always")
    def gauss_step(h, table, sigma32):
        step = sigma32 * table[(h >> 16) & 0x7FFF]
        return -step if h >> 31 else step

    @numba.njit(nogil=True, cache=True)
    def block_gauss_bf16(live, base, start, stop, ka, kb, sigma32, table):
        wide = np.empty(1, np.float32)
        bits = wide.view(np.uint32)
        for i in range(start, stop):
            h = fmix32(fmix32(np.uint64(i) ^ ka) ^ kb)
            step = gauss_step(h, table, sigma32)
            bits[0] = np.uint32(base[i]) << np.uint32(16)
            wide[0] = wide[0] + step
            u = bits[0]
            live[i] = np.uint16((u + (np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1)))) >> np.uint32(16))

    @numba.njit(nogil=True, cache=True)
    def block_gauss_fp32(live, base, start, stop, ka, kb, sigma32, table):
        for i in range(start, stop):
            h = fmix32(fmix32(np.uint64(i) ^ ka) ^ kb)
            live[i] = base[i] + gauss_step(h, table, sigma32)

    return block_bf16, block_fp32, block_gauss_bf16, block_gauss_fp32


_NUMBA = _compile_numba()


def _block(live: np.ndarray, base: np.ndarray, is_bf16: bool, start: int, stop: int, ka: int, kb: int,
           sigma32: np.float32, gauss: bool = False, use_numba: bool = True) -> None:
    if use_numba and _NUMBA is not None and (is_bf16 or live.dtype == np.float32):
        if gauss:
            fn = _NUMBA[2] if is_bf16 else _NUMBA[3]
            fn(live, base, start, stop, np.uint64(ka), np.uint64(kb), sigma32, gaussian_table())
        else:
            fn = _NUMBA[0] if is_bf16 else _NUMBA[1]
            fn(live, base, start, stop, np.uint64(ka), np.uint64(kb), sigma32)
    else:
        _block_numpy(live, base, is_bf16, start, stop, ka, kb, sigma32, gauss)


def reconstruct_many_cpu_(items, sigma: float, seed: int, threads: int | None = None, use_numba: bool = True,
                          noise: str = RADEMACHER) -> None:
    """live := base + sigma * N(seed, name) for (name, live, base) CPU tensors, over a thread pool
    (N: the noise of kind ``noise``). use_numba=False forces the numpy path (tests compare both with
    the reference)."""
    gauss = check_kind(noise) == GAUSSIAN
    sigma32 = np.float32(sigma)
    tasks = []
    for name, live, base in items:
        if live.dtype not in (torch.bfloat16, *_NUMPY_DTYPES) or not (live.is_contiguous() and base.is_contiguous()):
            raise ValueError(f"{name}: CPU kernel needs contiguous bf16/fp16/fp32 tensors")
        n = base.numel()
        if n >= 2**32:
            raise ValueError(f"{name}: {n} elements; the noise index is 32-bit")
        ka, kb = tensor_keys(seed, name, noise)
        lv, bv = _bits_view(live), _bits_view(base)
        for start in range(0, n, BLOCK):
            tasks.append((lv, bv, live.dtype == torch.bfloat16, start, min(n, start + BLOCK), ka, kb, sigma32,
                          gauss, use_numba))
    workers = max(1, threads or torch.get_num_threads() or os.cpu_count() or 1)
    if workers == 1 or len(tasks) == 1:
        for task in tasks:
            _block(*task)
        return
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for future in [pool.submit(_block, *task) for task in tasks]:
            future.result()
