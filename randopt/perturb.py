"""The one perturbation entry point every engine goes through.

An engine holds a resident base copy of each perturbable tensor under its checkpoint name and
asks this module to rebuild the live tensor for (seed, sigma), or to restore it. The noise itself is
defined in kernels/noise_ref.py; on CUDA the Triton kernel (when present) gives the same bits.
"""
from __future__ import annotations

from collections.abc import Mapping

import torch

from kernels.noise_ref import reconstruct_reference_


def _reconstruct_one_(live: torch.Tensor, base: torch.Tensor, seed: int, sigma: float, name: str) -> None:
    if live.is_cuda:
        try:
            from kernels.perturb_triton import reconstruct_triton_
        except ImportError:
            pass
        else:
            reconstruct_triton_(live, base, seed, sigma, name)
            return
    reconstruct_reference_(live, base, seed, sigma, name)


@torch.no_grad()
def reconstruct_(live: Mapping[str, torch.Tensor], base: Mapping[str, torch.Tensor], seed: int, sigma: float) -> None:
    """Set every live tensor to base + sigma * R(seed, name): path-independent and bit-identical
    however many seeds were set before."""
    if not sigma > 0:
        raise ValueError(f"sigma must be > 0, got {sigma!r}")
    for name, live_tensor in live.items():
        _reconstruct_one_(live_tensor, base[name], seed, sigma, name)


@torch.no_grad()
def restore_(live: Mapping[str, torch.Tensor], base: Mapping[str, torch.Tensor]) -> None:
    """Copy the base weights back exactly (same storage, so views stay valid)."""
    for name, live_tensor in live.items():
        live_tensor.copy_(base[name])
