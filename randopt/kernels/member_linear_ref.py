"""The member-batched linear layer's bit-exact reference: each member's effective weight materialised by
the reference switch (randopt/kernels/layout.py, itself on randopt/kernels/noise_ref.py), then an ordinary
matmul. The fused Triton kernel (member_linear_triton.py) must give exactly these effective weights, and
products equal to these within bf16 tolerance (its accumulation order is its own).

A member is (seed, sigma); seed None or sigma 0 is the base model (its weights are W0 itself), so a batch can
hold the base beside perturbed members.

Beside the functions, MemberLinearReference and MemberEmbeddingReference have the Triton classes' interface
(set_members, then calls on [M, rows, K] or ragged [rows, K] with segment offsets; an embedding gather perturbed
only at the rows read), so a model built on them (randopt/engines/member_fused.py) runs on a CPU at torch's speed
and on the kernels on a GPU with the same code. The reference materialises each member's weights once per group
(M copies: it is the definition, not the memory plan).
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from randopt.kernels.layout import LocalLayout, reconstruct_local_reference_, replicated
from randopt.kernels.noise_kinds import RADEMACHER, check_kind
from randopt.kernels.noise_ref import noise_step, tensor_keys

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


def segment_offsets(counts: Sequence[int], device: torch.device | str = "cpu") -> torch.Tensor:
    """int32 [M + 1] offsets of segments of ``counts`` rows (member m: rows offsets[m] .. offsets[m+1] - 1)."""
    out = torch.zeros(len(counts) + 1, dtype=torch.int32)
    out[1:] = torch.cumsum(torch.tensor(list(counts), dtype=torch.int64), 0).to(torch.int32)
    return out.to(device)


def _segments(offsets: torch.Tensor, members: int, rows: int) -> list[tuple[int, int]]:
    bounds = [int(v) for v in offsets.tolist()]
    if len(bounds) != members + 1 or bounds[0] != 0 or bounds[-1] != rows or any(
            b < a for a, b in zip(bounds, bounds[1:])):
        raise ValueError(f"offsets {bounds}: need {members + 1} values rising from 0 to the {rows} rows")
    return list(zip(bounds, bounds[1:]))


def _products(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, offsets: torch.Tensor | None) -> torch.Tensor:
    """fp32 products of X's rows with their member's weight of w [M, N, K], rounded once to X's dtype."""
    if offsets is None:
        y = torch.bmm(x.to(torch.float32), w.to(torch.float32).transpose(1, 2))
        if bias is not None:
            y = y + bias.to(torch.float32)[:, None, :]
        return y.to(x.dtype)
    y = torch.empty((x.shape[0], w.shape[1]), dtype=x.dtype, device=x.device)
    for m, (r0, r1) in enumerate(_segments(offsets, w.shape[0], x.shape[0])):
        if r1 > r0:
            part = x[r0:r1].to(torch.float32) @ w[m].to(torch.float32).T
            y[r0:r1] = (part + bias[m].to(torch.float32) if bias is not None else part).to(x.dtype)
    return y


def member_linear_reference(x: torch.Tensor, base: torch.Tensor, layout: LocalLayout, members: Sequence[Member],
                            noise: str = RADEMACHER, bias: torch.Tensor | None = None,
                            offsets: torch.Tensor | None = None) -> torch.Tensor:
    """Y[m] = X[m] @ W_m^T (+ bias[m]) for X [M, rows, K], base [N, K], bias [M, N] or None: fp32 products of
    the materialised weights, rounded once to X's dtype. With ``offsets`` [M + 1], X is [rows, K] sorted by
    member (member m's rows offsets[m] .. offsets[m+1] - 1, possibly none) and Y [rows, N]."""
    return _products(x, effective_weights_reference(base, layout, members, noise), bias, offsets)


def weight_layout(base: torch.Tensor, layout: LocalLayout | None, name: str | None, noise: str,
                  signs: bool) -> tuple[LocalLayout, str]:
    """A member linear's base weight checked against its layout (a whole tensor's, from its name, where none is
    given) and its noise kind against packed signs: the layout and the kind, for the kernel and the reference."""
    if layout is None:
        if name is None:
            raise ValueError("give the weight's layout, or the logical tensor's name for a whole tensor")
        layout = replicated(name, tuple(base.shape))
    if tuple(base.shape) != layout.shape:
        raise ValueError(f"base {tuple(base.shape)} does not match its layout {layout.shape}")
    noise = check_kind(noise)
    if signs and noise != RADEMACHER:
        raise ValueError("packed signs are Rademacher noise's; a Gaussian draw is hashed in the matmul")
    return layout, noise


class MemberLinearReference:
    """member_linear_triton.MemberLinear's interface on the reference: set_members materialises the group's
    effective weights [M, N, K] (the reference switch), and calls multiply as member_linear_reference does.
    ``signs`` is accepted for the interface (the packed signs are the same weights) and checked the same way."""

    def __init__(self, base: torch.Tensor, layout: LocalLayout | None = None, name: str | None = None,
                 noise: str = RADEMACHER, signs: bool = False) -> None:
        self.layout, self.noise = weight_layout(base, layout, name, noise, signs)
        self.base, self.signs = base, signs
        self.members: list[Member] = []
        self._weights: torch.Tensor | None = None

    def set_members(self, members: Sequence[Member]) -> None:
        self.members = list(members)
        self._weights = effective_weights_reference(self.base, self.layout, self.members, self.noise)

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None = None, weights_out: torch.Tensor | None = None,
                 offsets: torch.Tensor | None = None, max_rows: int | None = None) -> torch.Tensor:
        if self._weights is None:
            raise ValueError("set_members first")
        if x.dtype not in (self.base.dtype, torch.float32):
            raise ValueError(f"x is {x.dtype}: needs W0's {self.base.dtype} or float32")
        if weights_out is not None:
            weights_out.copy_(self._weights)
        if offsets is not None and max_rows is not None and len(self.members):
            longest = int((offsets[1:] - offsets[:-1]).max())
            if longest > max_rows:
                raise ValueError(f"a segment of {longest} rows is longer than max_rows={max_rows}")
        return _products(x, self._weights, bias, offsets)


def member_embedding_reference(ids: torch.Tensor, row_member: torch.Tensor, base: torch.Tensor, name: str,
                               members: Sequence[Member], noise: str = RADEMACHER) -> torch.Tensor:
    """Rows [*ids.shape, H] of the members' embeddings, each perturbed only where it is read: token t of member
    m = row_member[...] is rne(fp32(W0[t]) + rn32(sigma_m * N_m)) at the logical indices t*H .. t*H + H - 1 of
    the whole tensor ``name`` [vocab, H], W0[t] itself for a base member. The same bits as row t of the member's
    switched tensor, without the other vocab rows."""
    if ids.shape != row_member.shape:
        raise ValueError(f"ids {tuple(ids.shape)} and row_member {tuple(row_member.shape)} differ")
    hidden = base.shape[1]
    flat_ids, flat_m = ids.reshape(-1), row_member.reshape(-1)
    out = base[flat_ids].clone()   # base members' rows; perturbed members' rows replaced below
    for m, (seed, sigma) in enumerate(members):
        picked = (flat_m == m).nonzero().flatten()
        if is_base((seed, sigma)) or picked.numel() == 0:
            continue
        tokens = flat_ids[picked].to(torch.int64)
        index = tokens[:, None] * hidden + torch.arange(hidden, dtype=torch.int64, device=ids.device)[None, :]
        step = noise_step(index, tensor_keys(seed, name, noise), sigma, noise)
        out[picked] = (base[tokens].to(torch.float32) + step).to(base.dtype)
    return out.view(*ids.shape, hidden)


class MemberEmbeddingReference:
    """member_linear_triton.MemberEmbedding's interface on member_embedding_reference."""

    def __init__(self, base: torch.Tensor, name: str, noise: str = RADEMACHER) -> None:
        if base.dim() != 2:
            raise ValueError(f"an embedding is [vocab, H], got {tuple(base.shape)}")
        self.base, self.name, self.noise = base, name, check_kind(noise)
        self.members: list[Member] = []

    def set_members(self, members: Sequence[Member]) -> None:
        self.members = list(members)

    def __call__(self, ids: torch.Tensor, row_member: torch.Tensor, out_dtype: torch.dtype | None = None) -> torch.Tensor:
        out = member_embedding_reference(ids, row_member, self.base, self.name, self.members, self.noise)
        return out if out_dtype is None else out.to(out_dtype)
