"""Triton kernels with exactly the bits of kernels/noise_ref.py (and kernels/layout.py).

One kernel body does every switch: out := rne(fp32(src) + d) with d = sigma_to*R_to - sigma_from*R_from
(noise_ref.delta_step), so
  * absolute reconstruct (the default): src = base, only the "to" side (d = +-sigma);
  * in-place delta switch: src = out = live, both sides (or one: from base, or back to base).
Two launch shapes: a flat one for a contiguous range of logical indices (a whole tensor, or the
full-width row blocks of column-parallel / vocab-parallel / fused qkv and gate_up shards), and a
2-D tile one for column windows (row-parallel shards). At most one launch per block.

Why it is fast: the pass is memory bound (one read, one write per element), so the hash must stay
in registers and the loads must keep their vector width. The length ``n`` is deliberately left
specialized (Triton then knows n % 16 and keeps 16-byte accesses; excluding it made the pass 3.5x
slower); the keys and sigma change every seed and are excluded, so a new seed never recompiles.

Bit-exactness notes: every side of d is exactly +-sigma_f32, built by OR-ing the hash's top bit into
sigma's sign bit. bf16 is rounded to nearest even: by the hardware conversion when compiled, by hand
on the fp32 bits (add 0x7FFF + lsb, shift) and stored through an int16 view under the Triton
interpreter, whose bf16 store truncates. fp16 and fp32 use the plain conversion (RNE in both).
"""
from __future__ import annotations

import struct

import torch
import triton
import triton.language as tl

from kernels.layout import Block, LocalLayout, copy_gaps_
from kernels.noise_ref import check_logical_numel, tensor_keys


@triton.jit
def _sign_bit(i, k1, kb):
    """Bit 31 of h = fmix32(fmix32(i ^ ka) ^ kb) as uint32 (0 or 0x80000000); i, k1, kb uint32.

    k1 = ka ^ (ka >> 16) (host) folds the key into the first xor-shift, since
    (i ^ ka) ^ ((i ^ ka) >> 16) = i ^ (i >> 16) ^ k1; and the second fmix32's final
    h ^= h >> 16 leaves bit 31 alone, so it is skipped. Two integer ops saved per element."""
    h = i ^ (i >> 16) ^ k1
    h = h * 0x85EBCA6B
    h = h ^ (h >> 13)
    h = h * 0xC2B2AE35
    h = h ^ (h >> 16) ^ kb
    h = h ^ (h >> 16)
    h = h * 0x85EBCA6B
    h = h ^ (h >> 13)
    h = h * 0xC2B2AE35
    return h & 0x80000000


@triton.jit
def _signed_sigma(i, k1, kb, sbits):
    """sigma * R(i) in fp32: sigma's bits with the hash's top bit as the sign (R = -1 iff bit set)."""
    k1 = k1.to(tl.uint32, bitcast=True)
    kb = kb.to(tl.uint32, bitcast=True)
    sbits = sbits.to(tl.uint32, bitcast=True)
    return (_sign_bit(i, k1, kb) | sbits).to(tl.float32, bitcast=True)


@triton.jit
def _switched(x, i, k1_to, kb_to, sb_to, k1_fr, kb_fr, sb_fr, HAS_TO: tl.constexpr, HAS_FROM: tl.constexpr):
    """fp32(x) + d with d = sigma_to*R_to - sigma_from*R_from (an absent side contributes nothing)."""
    d = tl.zeros(x.shape, tl.float32)
    if HAS_TO:
        d = _signed_sigma(i, k1_to, kb_to, sb_to)
    if HAS_FROM:
        d = d - _signed_sigma(i, k1_fr, kb_fr, sb_fr)
    return x.to(tl.float32) + d


@triton.jit
def _store_rounded(ptr, y, mask, BF16_BY_HAND: tl.constexpr):
    """Store fp32 y rounded to nearest even into ptr's dtype. BF16_BY_HAND: ptr is an int16 view of
    bf16 storage and the rounding is done on the bits (NaN -> 0x7FC0, as torch does)."""
    if BF16_BY_HAND:
        b = y.to(tl.uint32, bitcast=True)
        r = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
        r = tl.where(y != y, 0x7FC0, r)
        tl.store(ptr, r.to(tl.uint16).to(tl.int16, bitcast=True), mask=mask)
    else:
        tl.store(ptr, y.to(ptr.dtype.element_ty), mask=mask)


_SCALARS = ["k1_to", "kb_to", "sb_to", "k1_fr", "kb_fr", "sb_fr"]


@triton.jit(do_not_specialize=_SCALARS)
def _flat_kernel(out_ptr, src_ptr, n, idx0,
                 k1_to, kb_to, sb_to, k1_fr, kb_fr, sb_fr,
                 HAS_TO: tl.constexpr, HAS_FROM: tl.constexpr, BF16_BY_HAND: tl.constexpr,
                 WIDE: tl.constexpr, BLOCK: tl.constexpr):
    """Elements 0..n-1 of a contiguous range whose logical indices are idx0 + 0..n-1."""
    pid = tl.program_id(0)
    if WIDE:  # offsets or indices reach 2**31: int64 offsets, indices truncated to uint32
        offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        idx = (offs + idx0).to(tl.uint32)
    else:
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        idx = (offs + idx0).to(tl.uint32)
    mask = offs < n
    x = tl.load(src_ptr + offs, mask=mask)
    y = _switched(x, idx, k1_to, kb_to, sb_to, k1_fr, kb_fr, sb_fr, HAS_TO, HAS_FROM)
    _store_rounded(out_ptr + offs, y, mask, BF16_BY_HAND)


@triton.jit(do_not_specialize=_SCALARS)
def _tile_kernel(out_ptr, src_ptr, nrows, ncols, row_stride, logical_row, logical_cols, logical_col,
                 k1_to, kb_to, sb_to, k1_fr, kb_fr, sb_fr,
                 HAS_TO: tl.constexpr, HAS_FROM: tl.constexpr, BF16_BY_HAND: tl.constexpr,
                 BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """A window of nrows x ncols local elements (row stride row_stride) holding logical rows
    logical_row.. and columns logical_col.. of a logical tensor with logical_cols columns."""
    r = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    mask = (r < nrows)[:, None] & (c < ncols)[None, :]
    offs = (r * row_stride)[:, None] + c[None, :]
    row_idx = ((r + logical_row) * logical_cols + logical_col).to(tl.uint32)  # < 2**32 by check
    idx = row_idx[:, None] + c.to(tl.uint32)[None, :]
    x = tl.load(src_ptr + offs, mask=mask)
    y = _switched(x, idx, k1_to, kb_to, sb_to, k1_fr, kb_fr, sb_fr, HAS_TO, HAS_FROM)
    _store_rounded(out_ptr + offs, y, mask, BF16_BY_HAND)


# ---------------------------------------------------------------------------------------------
# Host side

INTERPRETED = type(_flat_kernel).__name__ == "InterpretedFunction"


class LaunchConfig:
    """Launch parameters (module-wide; the bench sweeps them). bf16_by_hand forces the hand
    rounding on compiled code too (it is always on under the interpreter)."""
    block = 4096
    num_warps = 8
    tile_elems = 4096
    bf16_by_hand = False


_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def _i32(u: int) -> int:
    """A uint32 as the int32 with the same bits (scalar kernel args stay int32 for every value)."""
    return u - (1 << 32) if u >= (1 << 31) else u


def _side(seed: int | None, sigma: float, name: str) -> tuple[int, int, int] | None:
    """(k1, kb, sigma bits) of one side of a switch as int32, or None when the side is absent."""
    if seed is None or sigma == 0:
        return None
    ka, kb = tensor_keys(seed, name)
    sbits = struct.unpack("<I", struct.pack("<f", sigma))[0]  # "<f" rounds to nearest even, as torch
    if sbits & 0x80000000 or sbits & 0x7F800000 == 0x7F800000:
        raise ValueError(f"sigma must be finite and >= 0, got {sigma!r}")
    return _i32(ka ^ (ka >> 16)), _i32(kb), _i32(sbits)


def _scalar_args(to, frm) -> list:
    zeros = (0, 0, 0)
    return [*(to or zeros), *(frm or zeros), to is not None, frm is not None]


def _by_hand(t: torch.Tensor) -> bool:
    return t.dtype == torch.bfloat16 and (INTERPRETED or LaunchConfig.bf16_by_hand)


def _out_view(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int16) if _by_hand(t) else t


def _check_pair(out: torch.Tensor, src: torch.Tensor, what: str) -> None:
    if out.shape != src.shape or out.dtype != src.dtype or out.device != src.device:
        raise ValueError(f"{what}: live {tuple(out.shape)}/{out.dtype}/{out.device} does not match "
                         f"base {tuple(src.shape)}/{src.dtype}/{src.device}")
    if out.dtype not in _DTYPES:
        raise ValueError(f"{what}: dtype {out.dtype} not supported (bf16, fp16, fp32)")
    if not (out.is_contiguous() and src.is_contiguous()):
        raise ValueError(f"{what}: live and base must be contiguous")


def _launch_flat(out: torch.Tensor, src: torch.Tensor, idx0: int, to, frm) -> None:
    """out, src: 1-D contiguous views of the same length; logical indices idx0 + 0..n-1."""
    n = out.numel()
    if n == 0 or (to is None and frm is None):
        return
    block = LaunchConfig.block
    wide = n + idx0 + block >= 2**31
    _flat_kernel[(triton.cdiv(n, block),)](
        _out_view(out), src, n, idx0, *_scalar_args(to, frm), _by_hand(out), wide,
        BLOCK=block, num_warps=LaunchConfig.num_warps)


def _launch_tile(out2: torch.Tensor, src2: torch.Tensor, b: Block, to, frm) -> None:
    """out2, src2: the 2-D local views of the whole local tensor; one launch for block b."""
    ncols = b.width
    if b.nrows == 0 or ncols == 0:
        return
    block_c = min(1024, triton.next_power_of_2(ncols))
    block_r = max(1, LaunchConfig.tile_elems // block_c)
    out_win = out2[b.local_row:, b.local_col:]
    src_win = src2[b.local_row:, b.local_col:]
    grid = (triton.cdiv(b.nrows, block_r), triton.cdiv(ncols, block_c))
    _tile_kernel[grid](
        _out_view(out_win), src_win, b.nrows, ncols, out2.stride(0), b.logical_row, b.logical_cols,
        b.logical_col, *_scalar_args(to, frm), _by_hand(out2),
        BLOCK_R=block_r, BLOCK_C=block_c, num_warps=LaunchConfig.num_warps)


def _apply_blocks(out: torch.Tensor, src: torch.Tensor, layout: LocalLayout,
                  seed_to: int | None, sigma_to: float, seed_from: int | None, sigma_from: float) -> None:
    out2, src2 = out.view(layout.rows, layout.cols), src.view(layout.rows, layout.cols)
    for b in layout.blocks:
        to, frm = _side(seed_to, sigma_to, b.name), _side(seed_from, sigma_from, b.name)
        if b.full_rows and b.width == layout.cols:  # rows contiguous locally and logically
            start, n = b.local_row * layout.cols, b.nrows * layout.cols
            _launch_flat(out.view(-1)[start:start + n], src.view(-1)[start:start + n],
                         b.logical_row * b.logical_cols, to, frm)
        else:
            _launch_tile(out2, src2, b, to, frm)


# ---------------------------------------------------------------------------------------------
# Public entry points (same semantics as the references in noise_ref.py / layout.py)


def reconstruct_triton_(live: torch.Tensor, base: torch.Tensor, seed: int, sigma: float, name: str) -> None:
    """live := base + sigma * R(seed, name, ·) for a whole logical tensor (one launch)."""
    _check_pair(live, base, name)
    check_logical_numel(name, base.numel())
    if not sigma > 0:
        raise ValueError(f"sigma must be > 0, got {sigma!r}")
    _launch_flat(live.view(-1), base.view(-1), 0, _side(seed, sigma, name), None)


def delta_switch_triton_(live: torch.Tensor, name: str, seed_from: int | None, sigma_from: float,
                         seed_to: int | None, sigma_to: float) -> None:
    """In place: live := rne(fp32(live) + sigma_to*R_to - sigma_from*R_from) (one launch)."""
    _check_pair(live, live, name)
    check_logical_numel(name, live.numel())
    flat = live.view(-1)
    _launch_flat(flat, flat, 0, _side(seed_to, sigma_to, name), _side(seed_from, sigma_from, name))


def reconstruct_local_triton_(live: torch.Tensor, base: torch.Tensor, seed: int, sigma: float,
                              layout: LocalLayout) -> None:
    """A local (sharded / fused) tensor: blocks perturbed at their logical indices, gaps := base."""
    _check_pair(live, base, "local tensor")
    if tuple(live.shape) != layout.shape:
        raise ValueError(f"local tensor {tuple(live.shape)} does not match its layout {layout.shape}")
    if not sigma > 0:
        raise ValueError(f"sigma must be > 0, got {sigma!r}")
    _apply_blocks(live, base, layout, seed, sigma, None, 0.0)
    copy_gaps_(live, base, layout)


def delta_switch_local_triton_(live: torch.Tensor, layout: LocalLayout, seed_from: int | None,
                               sigma_from: float, seed_to: int | None, sigma_to: float) -> None:
    """In-place switch of a local tensor; gaps (padding) untouched."""
    _check_pair(live, live, "local tensor")
    if tuple(live.shape) != layout.shape:
        raise ValueError(f"local tensor {tuple(live.shape)} does not match its layout {layout.shape}")
    _apply_blocks(live, live, layout, seed_to, sigma_to, seed_from, sigma_from)
