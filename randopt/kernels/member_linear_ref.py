"""The member-batched linear layer's bit-exact reference: each member's effective weight materialised by
the reference switch (randopt/kernels/layout.py, itself on randopt/kernels/noise_ref.py), then an ordinary
matmul. The fused Triton kernel (member_linear_triton.py) must give exactly these effective weights, and
products equal to these within bf16 tolerance (its accumulation order is its own).

A member is (seed, sigma); seed None or sigma 0 is the base model (its weights are W0 itself), so a batch can
hold the base beside perturbed members.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from randopt.kernels.layout import LocalLayout, reconstruct_local_reference_
from randopt.kernels.noise_kinds import RADEMACHER

Member = tuple[int | None, float]


def is_base(member: Member) -> bool:
    seed, sigma = member
    return seed is None or sigma == 0


def effective_weights_reference(base: torch.Tensor, layout: LocalLayout, members: Sequence[Member],
                                noise: str = RADEMACHER) -> torch.Tensor:
    """[M, *base.shape]: member m's weight rne(fp32(W0) + rn32(sigma_m * N_m)) at each element's logical
    (name, index), the layout's gaps (padding) and base members left at W0."""
    out = torch.empty((len(members), *base.shape), dtype=base.dtype, device=base.device)
    for m, (seed, sigma) in enumerate(members):
        if is_base((seed, sigma)):
            out[m].copy_(base)
        else:
            reconstruct_local_reference_(out[m], base, seed, sigma, layout, noise)
    return out


def member_linear_reference(x: torch.Tensor, base: torch.Tensor, layout: LocalLayout, members: Sequence[Member],
                            noise: str = RADEMACHER, bias: torch.Tensor | None = None) -> torch.Tensor:
    """Y[m] = X[m] @ W_m^T (+ bias[m]) for X [M, rows, K], base [N, K], bias [M, N] or None: fp32 products of
    the materialised weights, rounded once to X's dtype."""
    w = effective_weights_reference(base, layout, members, noise)
    y = torch.bmm(x.to(torch.float32), w.to(torch.float32).transpose(1, 2))
    if bias is not None:
        y = y + bias.to(torch.float32)[:, None, :]
    return y.to(x.dtype)
