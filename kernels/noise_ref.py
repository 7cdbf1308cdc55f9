"""The Rademacher noise of randopt, defined once, and its bit-exact pure-torch reference.

Definition (version 1; golden vectors in tests pin it forever)
---------------------------------------------------------------
For a seed ``s`` (an integer in [0, 2**63)), a logical tensor named ``name`` (the checkpoint's own
name, e.g. ``model.layers.0.self_attn.q_proj.weight``) and an element's row-major index ``i`` in
that logical tensor (its checkpoint shape, never a fused or sharded layout; ``i < 2**32``):

    digest    = sha256(b"randopt-noise-v1\\0" + s.to_bytes(8, "little") + name.encode("utf-8"))
    ka, kb    = little-endian uint32 of digest[0:4] and digest[4:8]
    h         = fmix32(fmix32(i ^ ka) ^ kb)                     (all arithmetic mod 2**32)
    R(s,name,i) = +1 if (h >> 31) == 0 else -1

where fmix32 is MurmurHash3's finaliser:
    h ^= h >> 16; h *= 0x85EBCA6B; h ^= h >> 13; h *= 0xC2B2AE35; h ^= h >> 16.

Why this shape: the two keys come from a cryptographic hash on the host (once per tensor per seed),
so distinct (seed, tensor) pairs never share keys in practice (a 64-bit key); two rounds of fmix32
make i -> h a bijection per key pair with no shift structure between keys (one round over i ^ k
would make seed b's noise a xor-shuffled copy of seed a's whenever ka ^ kb < numel).

Perturbed weights: W = round_to_dtype(float32(W0) + float32(sigma) * R), computed in fp32 and
rounded to nearest even into the checkpoint dtype (bf16, fp16 or fp32).
"""
from __future__ import annotations

import hashlib

import numpy as np
import torch

NOISE_VERSION = 1
_MASK32 = 0xFFFFFFFF
_DOMAIN = b"randopt-noise-v1\0"
# Elements per chunk: 64K uint32 stay in L2 on the CPU path (4x faster than 1M chunks measured).
_CHUNK_CPU = 1 << 16
# Elements per chunk of the int64 torch path (GPU without Triton): bounds its temporaries.
_CHUNK_TORCH = 1 << 22


def tensor_keys(seed: int, name: str) -> tuple[int, int]:
    """The two uint32 keys (ka, kb) of one (seed, logical tensor)."""
    if not 0 <= int(seed) < 2**63:
        raise ValueError(f"seed must be an integer in [0, 2**63), got {seed!r}")
    digest = hashlib.sha256(_DOMAIN + int(seed).to_bytes(8, "little") + name.encode("utf-8")).digest()
    return int.from_bytes(digest[0:4], "little"), int.from_bytes(digest[4:8], "little")


def fmix32_int64(h: torch.Tensor) -> torch.Tensor:
    """MurmurHash3 fmix32 on uint32 values held in an int64 tensor (products wrap mod 2**64,
    and masking keeps the low 32 bits, which is exactly uint32 arithmetic)."""
    h = h ^ (h >> 16)
    h = (h * 0x85EBCA6B) & _MASK32
    h = h ^ (h >> 13)
    h = (h * 0xC2B2AE35) & _MASK32
    return h ^ (h >> 16)


def _fmix32_np_(h: np.ndarray) -> None:
    """fmix32 in place on a uint32 array (numpy uint32 arithmetic wraps mod 2**32)."""
    h ^= h >> np.uint32(16)
    h *= np.uint32(0x85EBCA6B)
    h ^= h >> np.uint32(13)
    h *= np.uint32(0xC2B2AE35)
    h ^= h >> np.uint32(16)


def negative_mask_range(start: int, stop: int, ka: int, kb: int) -> torch.Tensor:
    """CPU: the bool mask R == -1 for logical indices start..stop-1, through numpy uint32."""
    h = np.arange(start, stop, dtype=np.uint32)
    h ^= np.uint32(ka)
    _fmix32_np_(h)
    h ^= np.uint32(kb)
    _fmix32_np_(h)
    return torch.from_numpy((h >> np.uint32(31)).astype(np.bool_))


def hash_bits(index: torch.Tensor, ka: int, kb: int) -> torch.Tensor:
    """h = fmix32(fmix32(i ^ ka) ^ kb) for int64 indices in [0, 2**32)."""
    return fmix32_int64(fmix32_int64(index ^ ka) ^ kb)


def rademacher(seed: int, name: str, index: torch.Tensor) -> torch.Tensor:
    """R(seed, name, i) in {-1.0, +1.0} (float32) for the logical indices ``index`` (int64)."""
    ka, kb = tensor_keys(seed, name)
    h = hash_bits(index.to(torch.int64), ka, kb)
    return 1.0 - 2.0 * (h >> 31).to(torch.float32)


def reconstruct_reference_(live: torch.Tensor, base: torch.Tensor, seed: int, sigma: float, name: str) -> None:
    """live := base + sigma * R(seed, name, ·) for a whole logical tensor, in place, bit-exact.

    ``live`` and ``base`` have the logical (checkpoint) shape; ``live`` keeps its storage, so
    views of it held by a model (tied embeddings, CUDA graphs) see the new values.
    """
    if live.shape != base.shape or live.dtype != base.dtype:
        raise ValueError(f"{name}: live {tuple(live.shape)}/{live.dtype} does not match base "
                         f"{tuple(base.shape)}/{base.dtype}")
    n = base.numel()
    if n >= 2**32:
        raise ValueError(f"{name}: {n} elements; the noise index is 32-bit (at most 2**32 - 1 elements)")
    ka, kb = tensor_keys(seed, name)
    sig = torch.tensor(sigma, dtype=torch.float32).item()  # sigma as the fp32 the kernel uses
    flat_live, flat_base = live.view(-1), base.reshape(-1)
    on_cpu = base.device.type == "cpu"
    chunk = _CHUNK_CPU if on_cpu else _CHUNK_TORCH
    plus = torch.tensor(sig, dtype=torch.float32, device=base.device)
    for start in range(0, n, chunk):
        stop = min(n, start + chunk)
        if on_cpu:
            negative = negative_mask_range(start, stop, ka, kb)
        else:
            idx = torch.arange(start, stop, dtype=torch.int64, device=base.device)
            negative = (hash_bits(idx, ka, kb) >> 31).bool()
        step = torch.where(negative, -plus, plus)
        # fp32 add, then one round-to-nearest-even into the storage dtype.
        flat_live[start:stop] = (flat_base[start:stop].to(torch.float32) + step).to(live.dtype)
