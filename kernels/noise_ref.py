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

In-place delta switch (an option; the default is the absolute reconstruct above): from (seed_a, sigma_a)
to (seed_b, sigma_b), W := round_to_dtype(float32(W) + d) with d = float32(sigma_b)*R_b - float32(sigma_a)*R_a
computed in fp32 (one fp32 subtraction; a side with sigma 0 is absent). See delta_step.
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


def tensor_keys_many(seed: int, names: list[bytes]) -> np.ndarray:
    """tensor_keys for many tensors at once: a (len(names), 2) uint32 array of (ka, kb); names are
    the UTF-8 encoded tensor names. Same definition, one sha256 per name, no per-key Python ints."""
    if not 0 <= int(seed) < 2**63:
        raise ValueError(f"seed must be an integer in [0, 2**63), got {seed!r}")
    prefix = _DOMAIN + int(seed).to_bytes(8, "little")
    digests = b"".join([hashlib.sha256(prefix + name).digest()[:8] for name in names])
    return np.frombuffer(digests, dtype="<u4").reshape(len(names), 2)


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


def negative_mask_index(index: np.ndarray, ka: int, kb: int) -> np.ndarray:
    """CPU: the bool array R == -1 at logical indices ``index`` (any integer array, values < 2**32),
    through numpy uint32 arithmetic."""
    h = index.astype(np.uint32)  # always a copy: hashed in place below
    h ^= np.uint32(ka)
    _fmix32_np_(h)
    h ^= np.uint32(kb)
    _fmix32_np_(h)
    return (h >> np.uint32(31)).astype(np.bool_)


def negative_mask_range(start: int, stop: int, ka: int, kb: int) -> torch.Tensor:
    """CPU: the bool mask R == -1 for logical indices start..stop-1, through numpy uint32."""
    return torch.from_numpy(negative_mask_index(np.arange(start, stop, dtype=np.uint32), ka, kb))


def negative_mask(index: torch.Tensor, ka: int, kb: int) -> torch.Tensor:
    """The bool mask R == -1 at logical indices ``index`` (int64, any shape), on index's device:
    numpy uint32 on the CPU (fast), int64 torch arithmetic elsewhere."""
    if index.device.type == "cpu":
        return torch.from_numpy(negative_mask_index(index.numpy(), ka, kb))
    return (hash_bits(index.to(torch.int64), ka, kb) >> 31).bool()


def hash_bits(index: torch.Tensor, ka: int, kb: int) -> torch.Tensor:
    """h = fmix32(fmix32(i ^ ka) ^ kb) for int64 indices in [0, 2**32)."""
    return fmix32_int64(fmix32_int64(index ^ ka) ^ kb)


def rademacher(seed: int, name: str, index: torch.Tensor) -> torch.Tensor:
    """R(seed, name, i) in {-1.0, +1.0} (float32) for the logical indices ``index`` (int64)."""
    ka, kb = tensor_keys(seed, name)
    h = hash_bits(index.to(torch.int64), ka, kb)
    return 1.0 - 2.0 * (h >> 31).to(torch.float32)


def sigma_f32(sigma: float) -> float:
    """sigma as the fp32 value every implementation uses (round to nearest even)."""
    return torch.tensor(sigma, dtype=torch.float32).item()


def _negative_chunk(start: int, stop: int, ka: int, kb: int, device: torch.device) -> torch.Tensor:
    """R == -1 for the logical index range start..stop-1, computed on ``device``."""
    if device.type == "cpu":
        return negative_mask_range(start, stop, ka, kb)
    idx = torch.arange(start, stop, dtype=torch.int64, device=device)
    return (hash_bits(idx, ka, kb) >> 31).bool()


def _signed(negative: torch.Tensor, sig: float) -> torch.Tensor:
    """sigma * R in fp32 (exactly +-sigma_f32)."""
    plus = torch.tensor(sig, dtype=torch.float32, device=negative.device)
    return torch.where(negative, -plus, plus)


def check_logical_numel(name: str, n: int) -> None:
    if n >= 2**32:
        raise ValueError(f"{name}: {n} elements; the noise index is 32-bit (at most 2**32 - 1 elements)")


def reconstruct_reference_(live: torch.Tensor, base: torch.Tensor, seed: int, sigma: float, name: str) -> None:
    """live := base + sigma * R(seed, name, ·) for a whole logical tensor, in place, bit-exact.

    ``live`` and ``base`` have the logical (checkpoint) shape; ``live`` keeps its storage, so
    views of it held by a model (tied embeddings, CUDA graphs) see the new values.
    """
    if live.shape != base.shape or live.dtype != base.dtype:
        raise ValueError(f"{name}: live {tuple(live.shape)}/{live.dtype} does not match base "
                         f"{tuple(base.shape)}/{base.dtype}")
    n = base.numel()
    check_logical_numel(name, n)
    ka, kb = tensor_keys(seed, name)
    sig = sigma_f32(sigma)  # sigma as the fp32 the kernel uses
    flat_live, flat_base = live.view(-1), base.reshape(-1)
    chunk = _CHUNK_CPU if base.device.type == "cpu" else _CHUNK_TORCH
    for start in range(0, n, chunk):
        stop = min(n, start + chunk)
        step = _signed(_negative_chunk(start, stop, ka, kb, base.device), sig)
        # fp32 add, then one round-to-nearest-even into the storage dtype.
        flat_live[start:stop] = (flat_base[start:stop].to(torch.float32) + step).to(live.dtype)


def delta_step(negative_to: torch.Tensor | None, sigma_to: float,
               negative_from: torch.Tensor | None, sigma_from: float) -> torch.Tensor:
    """The fp32 increment of one in-place switch: d = sigma_to*R_to - sigma_from*R_from.

    Each side is exactly +-sigma_f32; a side whose sigma is 0 is absent (its mask may be None) and
    contributes nothing, so d is sigma_to*R_to, or -sigma_from*R_from, or one fp32 subtraction."""
    ref = negative_to if negative_to is not None else negative_from
    d = torch.zeros(ref.shape, dtype=torch.float32, device=ref.device)
    if sigma_to != 0:
        d = _signed(negative_to, sigma_f32(sigma_to))
    if sigma_from != 0:
        d = d - _signed(negative_from, sigma_f32(sigma_from))
    return d


def delta_switch_reference_(live: torch.Tensor, name: str, seed_from: int | None, sigma_from: float,
                            seed_to: int | None, sigma_to: float) -> None:
    """In-place switch live := rne(fp32(live) + d), d = delta_step(...) (see delta_step), bit-exact.

    Switching base -> seed is (None, 0, seed, sigma); seed -> base is (seed, sigma, None, 0). Unlike
    the absolute reconstruct this drifts in bf16/fp16: rounding errors of successive switches stay.
    """
    sigma_from = 0.0 if seed_from is None else sigma_from
    sigma_to = 0.0 if seed_to is None else sigma_to
    if sigma_from == 0 and sigma_to == 0:
        return
    n = live.numel()
    check_logical_numel(name, n)
    keys_to = tensor_keys(seed_to, name) if sigma_to != 0 else None
    keys_from = tensor_keys(seed_from, name) if sigma_from != 0 else None
    flat = live.view(-1)
    chunk = _CHUNK_CPU if live.device.type == "cpu" else _CHUNK_TORCH
    for start in range(0, n, chunk):
        stop = min(n, start + chunk)
        neg_to = _negative_chunk(start, stop, *keys_to, live.device) if keys_to else None
        neg_from = _negative_chunk(start, stop, *keys_from, live.device) if keys_from else None
        d = delta_step(neg_to, sigma_to, neg_from, sigma_from)
        flat[start:stop] = (flat[start:stop].to(torch.float32) + d).to(live.dtype)
