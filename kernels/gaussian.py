"""Gaussian noise (an option; the default is the Rademacher noise of kernels/noise_ref.py).

Definition (gaussian version 1)
-------------------------------
For a seed ``s``, a logical tensor ``name`` and a row-major logical index ``i`` (as in noise_ref):

    digest         = sha256(b"randopt-gauss-v1\\0" + s.to_bytes(8, "little") + name.encode("utf-8"))
    ka, kb, kc, kd = little-endian uint32 of digest[0:4], [4:8], [8:12], [12:16]
    h1 = fmix32(fmix32(i ^ ka) ^ kb),  h2 = fmix32(fmix32(i ^ kc) ^ kd)
    u1 = ((h1 >> 8) + 1) / 2**24       in (0, 1]  (never 0: log stays finite)
    u2 = (h2 >> 8) / 2**24             in [0, 1)
    Z(s, name, i) = float32( sqrt(-2 ln u1) * cos(2 pi u2) )   (Box-Muller, computed in float64)

so |Z| <= sqrt(2 ln 2**24) = 5.77. Perturbed weights: W = round_to_dtype(float32(W0) +
float32(float32(sigma) * Z)). The domain string differs from the Rademacher one, so the two noises
share no keys.

This is a materializing torch path (it builds Z in float64 chunks), several times slower than the
Rademacher kernel. log and cos come from the device's math library: CPU and CUDA can differ in the
last float64 bit, which survives the rounding to float32 only in rare ties, so Gaussian weights are
reproducible per device but not pinned bit-for-bit across devices (the Rademacher noise is).
"""
from __future__ import annotations

import hashlib
import math

import torch

from kernels.noise_ref import check_logical_numel, hash_bits, sigma_f32

GAUSS_VERSION = 1
_DOMAIN = b"randopt-gauss-v1\0"
_CHUNK = 1 << 20


def gaussian_keys(seed: int, name: str) -> tuple[int, int, int, int]:
    """The four uint32 keys (ka, kb, kc, kd) of one (seed, logical tensor)."""
    if not 0 <= int(seed) < 2**63:
        raise ValueError(f"seed must be an integer in [0, 2**63), got {seed!r}")
    digest = hashlib.sha256(_DOMAIN + int(seed).to_bytes(8, "little") + name.encode("utf-8")).digest()
    return tuple(int.from_bytes(digest[j:j + 4], "little") for j in range(0, 16, 4))  # type: ignore[return-value]


def gaussian(seed: int, name: str, index: torch.Tensor) -> torch.Tensor:
    """Z(seed, name, i) (float32) at the logical indices ``index`` (int64, values < 2**32)."""
    ka, kb, kc, kd = gaussian_keys(seed, name)
    index = index.to(torch.int64)
    u1 = ((hash_bits(index, ka, kb) >> 8) + 1).to(torch.float64) / 2.0**24
    u2 = (hash_bits(index, kc, kd) >> 8).to(torch.float64) / 2.0**24
    return (torch.sqrt(-2.0 * torch.log(u1)) * torch.cos((2.0 * math.pi) * u2)).to(torch.float32)


def reconstruct_gaussian_(live: torch.Tensor, base: torch.Tensor, seed: int, sigma: float, name: str) -> None:
    """live := rne(fp32(base) + fp32(sigma_f32 * Z(seed, name, ·))) for a whole logical tensor."""
    if live.shape != base.shape or live.dtype != base.dtype:
        raise ValueError(f"{name}: live {tuple(live.shape)}/{live.dtype} does not match base "
                         f"{tuple(base.shape)}/{base.dtype}")
    n = base.numel()
    check_logical_numel(name, n)
    sig = sigma_f32(sigma)
    flat_live, flat_base = live.view(-1), base.reshape(-1)
    for start in range(0, n, _CHUNK):
        stop = min(n, start + _CHUNK)
        z = gaussian(seed, name, torch.arange(start, stop, dtype=torch.int64, device=base.device))
        flat_live[start:stop] = (flat_base[start:stop].to(torch.float32) + sig * z).to(live.dtype)
