"""Triton kernels with exactly the bits of randopt/kernels/noise_ref.py (and randopt/kernels/layout.py).

One kernel body does every switch: out := rne(fp32(src) + d) with d = sigma_to*R_to - sigma_from*R_from
(noise_ref.delta_step), so
  * absolute reconstruct (the default): src = base, only the "to" side (d = +-sigma);
  * in-place delta switch: src = out = live, both sides (or one: from base, or back to base).
Two launch shapes: a flat one for a contiguous range of logical indices (a whole tensor, or the
full-width row blocks of column-parallel / vocab-parallel / fused qkv and gate_up shards), and a
2-D tile one for column windows (row-parallel shards). At most one launch per block.

Two ways to launch: eagerly (reconstruct_triton_ & co., keys as scalar arguments), or through a
SwitchPlan, which captures all launches of a switch in a CUDA graph once and reads the per-seed keys
from a device table (measured on an H200: eager launches cost ~45 us of host time each, which made a
339-tensor switch host-bound at 2x the copy floor; the graph replay runs at the floor).

Why it is fast: the pass is memory bound (one read, one write per element), so the hash must stay
in registers and the loads must keep their vector width. The length ``n`` is deliberately left
specialized (Triton then knows n % 16 and keeps 16-byte accesses; excluding it made the pass 3.5x
slower); the keys and sigma change every seed and are excluded, so a new seed never recompiles.

Bit-exactness notes: every Rademacher side of d is exactly +-sigma_f32, built by OR-ing the hash's
top bit into sigma's sign bit. A Gaussian side (GAUSS) reads T[(h >> 16) & 0x7FFF] from a 128 KiB
device table, ORs the same bit into its sign and multiplies by sigma in fp32. That product must be
rounded before the add (the definition, randopt/kernels/noise_ref.py): on CUDA, Triton contracts a*b + c into
one FMA by default (LLVM and ptxas both), which rounds once and changes the last bit of some fp32
sums, so Gaussian launches pass enable_fp_fusion=False (no contraction in LLVM, ptxas --fmad=false).
Rademacher launches keep the default: they multiply nothing, so there is nothing to contract, and
their compiled code stays what bench/perturb/ measured. The interpreter (numpy) never fuses, so it
cannot show this: tests/test_kernel_cuda.py and bench/perturb/bench_perturb_h200.py check the
compiled Gaussian kernels against the reference on a GPU. bf16 is rounded to nearest even: by the
hardware conversion when compiled, by hand on the fp32 bits (add 0x7FFF + lsb, shift) and stored
through an int16 view under the Triton interpreter, whose bf16 store truncates. fp16 and fp32 use
the plain conversion (RNE in both).
"""
from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch
import triton
import triton.language as tl

from randopt.kernels.layout import Block, LocalLayout, copy_gaps_, replicated
from randopt.kernels.noise_kinds import GAUSSIAN, RADEMACHER, check_kind
from randopt.kernels.noise_ref import check_logical_numel, gaussian_table_bits, tensor_keys, tensor_keys_many


@triton.jit
def _mixed(i, k1, kb):
    """h = fmix32(fmix32(i ^ ka) ^ kb) but for its final h ^= h >> 16, as uint32; i, k1, kb uint32.

    k1 = ka ^ (ka >> 16) (host) folds the key into the first xor-shift, since
    (i ^ ka) ^ ((i ^ ka) >> 16) = i ^ (i >> 16) ^ k1; and the second fmix32's final
    h ^= h >> 16 leaves bits 16..31 alone (all either noise reads), so it is skipped. Two integer
    ops saved per element."""
    h = i ^ (i >> 16) ^ k1
    h = h * 0x85EBCA6B
    h = h ^ (h >> 13)
    h = h * 0xC2B2AE35
    h = h ^ (h >> 16) ^ kb
    h = h ^ (h >> 16)
    h = h * 0x85EBCA6B
    h = h ^ (h >> 13)
    h = h * 0xC2B2AE35
    return h


@triton.jit
def _noise_step(i, k1, kb, sbits, table_ptr, GAUSS: tl.constexpr):
    """sigma * N(i) in fp32. Rademacher: sigma's bits with the hash's top bit as the sign (R = -1 iff
    bit set), exact. Gaussian: G = T[(h >> 16) & 0x7FFF] with bit 31 as its sign, times sigma,
    rounded to fp32 (launched with enable_fp_fusion=False, so the add after it stays an add)."""
    k1 = k1.to(tl.uint32, bitcast=True)
    kb = kb.to(tl.uint32, bitcast=True)
    sbits = sbits.to(tl.uint32, bitcast=True)
    h = _mixed(i, k1, kb)
    if GAUSS:
        magnitude = tl.load(table_ptr + ((h >> 16) & 0x7FFF).to(tl.int32)).to(tl.uint32, bitcast=True)
        g = (magnitude | (h & 0x80000000)).to(tl.float32, bitcast=True)
        step = g * sbits.to(tl.float32, bitcast=True)
    else:
        step = ((h & 0x80000000) | sbits).to(tl.float32, bitcast=True)
    return step


@triton.jit
def _switched(x, i, table_ptr, k1_to, kb_to, sb_to, k1_fr, kb_fr, sb_fr, HAS_TO: tl.constexpr,
              HAS_FROM: tl.constexpr, GAUSS: tl.constexpr):
    """fp32(x) + d with d = sigma_to*N_to - sigma_from*N_from (an absent side contributes nothing)."""
    d = tl.full(x.shape, 0.0, tl.float32)  # tl.full is a builtin (tl.zeros is a jit helper: see tests)
    if HAS_TO:
        d = _noise_step(i, k1_to, kb_to, sb_to, table_ptr, GAUSS)
    if HAS_FROM:
        d = d - _noise_step(i, k1_fr, kb_fr, sb_fr, table_ptr, GAUSS)
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


@triton.jit
def _load_keys(keys_ptr):
    """The six per-launch scalars from a key-table row (int32: k1_to, kb_to, sb_to, k1_fr, kb_fr, sb_fr)."""
    return (tl.load(keys_ptr + 0), tl.load(keys_ptr + 1), tl.load(keys_ptr + 2),
            tl.load(keys_ptr + 3), tl.load(keys_ptr + 4), tl.load(keys_ptr + 5))


@triton.jit(do_not_specialize=_SCALARS)
def _flat_kernel(out_ptr, src_ptr, n, idx0, keys_ptr, table_ptr,
                 k1_to, kb_to, sb_to, k1_fr, kb_fr, sb_fr,
                 HAS_TO: tl.constexpr, HAS_FROM: tl.constexpr, KEYS_FROM_TABLE: tl.constexpr, GAUSS: tl.constexpr,
                 BF16_BY_HAND: tl.constexpr, WIDE: tl.constexpr, BLOCK: tl.constexpr):
    """Elements 0..n-1 of a contiguous range whose logical indices are idx0 + 0..n-1.
    KEYS_FROM_TABLE: the keys come from memory (a CUDA graph replays fixed scalar arguments)."""
    if KEYS_FROM_TABLE:
        k1_to, kb_to, sb_to, k1_fr, kb_fr, sb_fr = _load_keys(keys_ptr)
    pid = tl.program_id(0)
    if WIDE:  # offsets or indices reach 2**31: int64 offsets, indices truncated to uint32
        offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    else:
        offs = pid * BLOCK + tl.arange(0, BLOCK)
    idx = (offs + idx0).to(tl.uint32)
    mask = offs < n
    x = tl.load(src_ptr + offs, mask=mask)
    y = _switched(x, idx, table_ptr, k1_to, kb_to, sb_to, k1_fr, kb_fr, sb_fr, HAS_TO, HAS_FROM, GAUSS)
    _store_rounded(out_ptr + offs, y, mask, BF16_BY_HAND)


@triton.jit(do_not_specialize=_SCALARS)
def _tile_kernel(out_ptr, src_ptr, nrows, ncols, row_stride, logical_row, logical_cols, logical_col, keys_ptr,
                 table_ptr, k1_to, kb_to, sb_to, k1_fr, kb_fr, sb_fr,
                 HAS_TO: tl.constexpr, HAS_FROM: tl.constexpr, KEYS_FROM_TABLE: tl.constexpr, GAUSS: tl.constexpr,
                 BF16_BY_HAND: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """A window of nrows x ncols local elements (row stride row_stride) holding logical rows
    logical_row.. and columns logical_col.. of a logical tensor with logical_cols columns."""
    if KEYS_FROM_TABLE:
        k1_to, kb_to, sb_to, k1_fr, kb_fr, sb_fr = _load_keys(keys_ptr)
    r = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    mask = (r < nrows)[:, None] & (c < ncols)[None, :]
    offs = (r * row_stride)[:, None] + c[None, :]
    row_idx = ((r + logical_row) * logical_cols + logical_col).to(tl.uint32)  # < 2**32 by check
    idx = row_idx[:, None] + c.to(tl.uint32)[None, :]
    x = tl.load(src_ptr + offs, mask=mask)
    y = _switched(x, idx, table_ptr, k1_to, kb_to, sb_to, k1_fr, kb_fr, sb_fr, HAS_TO, HAS_FROM, GAUSS)
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
_NO_KEYS = (0, 0, 0)


def _i32(u: int) -> int:
    """A uint32 as the int32 with the same bits (scalar kernel args stay int32 for every value)."""
    return u - (1 << 32) if u >= (1 << 31) else u


def _sigma_bits(sigma: float) -> int:
    """fp32 bits of sigma (round to nearest even, as torch); sigma must be finite and > 0."""
    bits = int(np.array(sigma, dtype=np.float32).view(np.uint32))
    if not (sigma > 0 and bits < 0x7F800000):
        raise ValueError(f"sigma must be finite and > 0, got {sigma!r}")
    return bits


def _side(seed: int | None, sigma: float, name: str, noise: str) -> tuple[int, int, int] | None:
    """(k1, kb, sigma bits) of one side of a switch as int32, or None when the side is absent."""
    if seed is None or sigma == 0:
        return None
    ka, kb = tensor_keys(seed, name, noise)
    return _i32(ka ^ (ka >> 16)), _i32(kb), _i32(_sigma_bits(sigma))


_TABLES: dict[torch.device, torch.Tensor] = {}


def _gauss_table(device: torch.device) -> torch.Tensor:
    """T's float32 bits as an int32 tensor on ``device``, uploaded once (a CUDA graph replays its pointer)."""
    table = _TABLES.get(device)
    if table is None:
        table = _TABLES[device] = torch.from_numpy(gaussian_table_bits().view(np.int32).copy()).to(device)
    return table


@dataclass(frozen=True)
class _Keys:
    """What one launch needs to know about the switch: which sides are present, their keys (scalars
    for eager launches, or a key-table row for launches replayed by a CUDA graph), and the noise."""
    has_to: bool
    has_from: bool
    to: tuple[int, int, int] = _NO_KEYS
    frm: tuple[int, int, int] = _NO_KEYS
    row: torch.Tensor | None = None
    gauss: bool = False

    def args(self, dummy: torch.Tensor) -> list:
        """keys_ptr, table_ptr, the six scalars, HAS_TO, HAS_FROM, KEYS_FROM_TABLE, GAUSS; dummy stands
        in for an unused pointer (never read: KEYS_FROM_TABLE or GAUSS is then False)."""
        row = self.row if self.row is not None else dummy
        table = _gauss_table(dummy.device) if self.gauss else dummy
        return [row, table, *self.to, *self.frm, self.has_to, self.has_from, self.row is not None, self.gauss]

    def options(self) -> dict:
        """Compile options: a Gaussian side's product must be rounded before the add (no FMA)."""
        return {"enable_fp_fusion": False} if self.gauss else {}


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


def _launch_flat(out: torch.Tensor, src: torch.Tensor, start: int, n: int, idx0: int, keys: _Keys):
    """Elements start..start+n-1 of the contiguous out/src; their logical indices are idx0 + 0..n-1.
    Returns what Triton's launch returns (compiled: the kernel, whose .asm the CUDA tests read)."""
    if n == 0:
        return None
    if start:
        out, src = out.view(-1)[start:], src.view(-1)[start:]
    block = LaunchConfig.block
    wide = n + idx0 + block >= 2**31
    return _flat_kernel[(triton.cdiv(n, block),)](
        _out_view(out), src, n, idx0, *keys.args(src), _by_hand(out), wide,
        BLOCK=block, num_warps=LaunchConfig.num_warps, **keys.options())


def _launch_tile(out2: torch.Tensor, src2: torch.Tensor, b: Block, keys: _Keys):
    """out2, src2: the 2-D local views of the whole local tensor; one launch for block b (returns
    Triton's launch result, as _launch_flat)."""
    ncols = b.width
    if b.nrows == 0 or ncols == 0:
        return None
    block_c = min(1024, triton.next_power_of_2(ncols))
    block_r = max(1, LaunchConfig.tile_elems // block_c)
    out_win = out2[b.local_row:, b.local_col:]
    src_win = src2[b.local_row:, b.local_col:]
    grid = (triton.cdiv(b.nrows, block_r), triton.cdiv(ncols, block_c))
    return _tile_kernel[grid](
        _out_view(out_win), src_win, b.nrows, ncols, out2.stride(0), b.logical_row, b.logical_cols,
        b.logical_col, *keys.args(src2), _by_hand(out2),
        BLOCK_R=block_r, BLOCK_C=block_c, num_warps=LaunchConfig.num_warps, **keys.options())


def _launch_block(out: torch.Tensor, src: torch.Tensor, layout: LocalLayout, b: Block, keys: _Keys) -> None:
    """One launch for block b of the contiguous local tensors out/src: the flat kernel when the
    block's rows are contiguous both locally and logically, else the tile kernel."""
    if b.full_rows and b.width == layout.cols:
        cols = layout.cols
        _launch_flat(out, src, b.local_row * cols, b.nrows * cols, b.logical_row * b.logical_cols, keys)
    else:
        rows = layout.rows
        _launch_tile(out.view(rows, layout.cols), src.view(rows, layout.cols), b, keys)


# ---------------------------------------------------------------------------------------------
# Eager entry points (same semantics as the references in noise_ref.py / layout.py)


def reconstruct_triton_(live: torch.Tensor, base: torch.Tensor, seed: int, sigma: float, name: str,
                        noise: str = RADEMACHER) -> None:
    """live := base + sigma * N(seed, name, ·) for a whole logical tensor (one launch)."""
    _check_pair(live, base, name)
    check_logical_numel(name, base.numel())
    _sigma_bits(sigma)  # validates: sigma > 0 (a zero sigma would make _side return None)
    keys = _Keys(True, False, to=_side(seed, sigma, name, noise), gauss=check_kind(noise) == GAUSSIAN)
    _launch_flat(live, base, 0, live.numel(), 0, keys)


def delta_switch_triton_(live: torch.Tensor, name: str, seed_from: int | None, sigma_from: float,
                         seed_to: int | None, sigma_to: float, noise: str = RADEMACHER) -> None:
    """In place: live := rne(fp32(live) + sigma_to*N_to - sigma_from*N_from) (one launch)."""
    _check_pair(live, live, name)
    check_logical_numel(name, live.numel())
    to, frm = _side(seed_to, sigma_to, name, noise), _side(seed_from, sigma_from, name, noise)
    if to or frm:
        _launch_flat(live, live, 0, live.numel(), 0, _Keys(bool(to), bool(frm), to or _NO_KEYS, frm or _NO_KEYS,
                                                           gauss=check_kind(noise) == GAUSSIAN))


def _check_local(live: torch.Tensor, src: torch.Tensor, layout: LocalLayout) -> None:
    _check_pair(live, src, "local tensor")
    if tuple(live.shape) != layout.shape:
        raise ValueError(f"local tensor {tuple(live.shape)} does not match its layout {layout.shape}")


def reconstruct_local_triton_(live: torch.Tensor, base: torch.Tensor, seed: int, sigma: float,
                              layout: LocalLayout, noise: str = RADEMACHER) -> None:
    """A local (sharded / fused) tensor: blocks perturbed at their logical indices, gaps := base."""
    _check_local(live, base, layout)
    _sigma_bits(sigma)
    gauss = check_kind(noise) == GAUSSIAN
    for b in layout.blocks:
        _launch_block(live, base, layout, b, _Keys(True, False, to=_side(seed, sigma, b.name, noise), gauss=gauss))
    copy_gaps_(live, base, layout)


def delta_switch_local_triton_(live: torch.Tensor, layout: LocalLayout, seed_from: int | None,
                               sigma_from: float, seed_to: int | None, sigma_to: float,
                               noise: str = RADEMACHER) -> None:
    """In-place switch of a local tensor; gaps (padding) untouched."""
    _check_local(live, live, layout)
    gauss = check_kind(noise) == GAUSSIAN
    for b in layout.blocks:
        to, frm = _side(seed_to, sigma_to, b.name, noise), _side(seed_from, sigma_from, b.name, noise)
        if to or frm:
            _launch_block(live, live, layout, b, _Keys(bool(to), bool(frm), to or _NO_KEYS, frm or _NO_KEYS,
                                                       gauss=gauss))


# ---------------------------------------------------------------------------------------------
# Plans: the same launches, captured once in a CUDA graph

_ROW = 8  # int32 per key-table row (6 used): 32-byte rows keep every row pointer 16-byte aligned


def _scratch_like(t: torch.Tensor) -> torch.Tensor:
    """An uninitialised tensor like t whose data_ptr has t's residue mod 16, so a kernel launched
    on it compiles exactly the specialization (pointer alignment) that t's launches use."""
    pad = 16 // t.element_size()
    flat = torch.empty(t.numel() + pad, dtype=t.dtype, device=t.device)
    shift = ((t.data_ptr() - flat.data_ptr()) % 16) // t.element_size()
    return flat[shift:shift + t.numel()].view(t.shape)


class SwitchPlan:
    """Switches of a fixed set of tensors, fast: eager launches cost ~45 us of host time each
    (Triton's launcher plus ours), more than the GPU needs for most tensors, so on CUDA the
    launches of one switch are captured once in a CUDA graph whose kernels read the per-seed keys
    from a small device table; a switch is then one key upload and one graph replay. Same bits as
    the eager entry points (the same kernels).

    live: local tensors by key; base: their resident base copies (reconstruct; None for a
    delta-only plan); layouts: by key (None: keys are checkpoint names, whole tensors); noise: the
    plan's noise kind (every switch of an engine uses one). The plan holds on to the tensors: build a
    new one if they are reallocated.
    """

    def __init__(self, live: Mapping[str, torch.Tensor], base: Mapping[str, torch.Tensor] | None = None,
                 layouts: Mapping[str, LocalLayout] | None = None, use_graphs: bool | None = None,
                 noise: str = RADEMACHER) -> None:
        self._noise = check_kind(noise)
        self._items = []  # (live, base or None, layout)
        names = []
        for key, t in live.items():
            lay = layouts[key] if layouts is not None else replicated(key, tuple(t.shape))
            src = base[key] if base is not None else None
            _check_local(t, src if src is not None else t, lay)
            self._items.append((t, src, lay))
            names += [b.name for b in lay.blocks]
        self._names = [n.encode("utf-8") for n in names]
        device = next(iter(live.values())).device if self._items else torch.device("cpu")
        on_gpu = device.type == "cuda"
        self._graphs_on = (on_gpu and not INTERPRETED) if use_graphs is None else use_graphs
        # the kernels read the keys where the tensors live: a pinned host buffer, uploaded per switch
        self._host = torch.zeros((len(names), _ROW), dtype=torch.int32, pin_memory=on_gpu)
        self._table = self._host.to(device) if on_gpu else self._host
        self._uploaded = torch.cuda.Event() if on_gpu else None
        self._graphs: dict[tuple[bool, bool, bool], torch.cuda.CUDAGraph] = {}
        self._recent_keys: dict[int, np.ndarray] = {}  # a delta walk's "from" was the last "to"

    # -- public

    def reconstruct_(self, seed: int, sigma: float) -> None:
        """Every live tensor := base + sigma * R(seed) (gaps := base)."""
        if any(src is None for _, src, _ in self._items):
            raise ValueError("this plan has no base copy: only delta switches")
        self._fill(seed, sigma, None, 0.0)
        self._run((False, True, False))

    def delta_switch_(self, seed_from: int | None, sigma_from: float, seed_to: int | None, sigma_to: float) -> None:
        """In place: W := rne(fp32(W) + sigma_to*R_to - sigma_from*R_from); seed None is base."""
        has_to, has_from = seed_to is not None and sigma_to != 0, seed_from is not None and sigma_from != 0
        if has_to or has_from:
            self._fill(seed_to if has_to else None, sigma_to, seed_from if has_from else None, sigma_from)
            self._run((True, has_to, has_from))

    # -- internals

    def _fill(self, seed_to, sigma_to, seed_from, sigma_from) -> None:
        """Write both sides' keys into the key table (host, then one upload on the current stream)."""
        if self._uploaded is not None:
            self._uploaded.synchronize()  # the previous upload has read the pinned buffer
        host = self._host.numpy().view(np.uint32)
        for col, seed, sigma in ((0, seed_to, sigma_to), (3, seed_from, sigma_from)):
            if seed is not None:
                keys = self._keys(seed)
                host[:, col] = keys[:, 0] ^ (keys[:, 0] >> np.uint32(16))
                host[:, col + 1] = keys[:, 1]
                host[:, col + 2] = _sigma_bits(sigma)
        if self._uploaded is not None:
            self._table.copy_(self._host, non_blocking=True)
            self._uploaded.record()

    def _keys(self, seed: int) -> np.ndarray:
        """(ka, kb) of every slot for a seed; the last two seeds are kept (sha256 costs ~0.7 us each)."""
        keys = self._recent_keys.get(seed)
        if keys is None:
            keys = tensor_keys_many(seed, self._names, self._noise)
            self._recent_keys = {k: v for k, v in list(self._recent_keys.items())[-1:]}
            self._recent_keys[seed] = keys
        return keys

    def _run(self, mode: tuple[bool, bool, bool]) -> None:
        if not self._graphs_on:
            self._launch_all(mode)
            return
        graph = self._graphs.get(mode)
        if graph is None:
            graph = self._capture(mode)
            if graph is None:
                self._launch_all(mode)
                return
        graph.replay()

    def _capture(self, mode: tuple[bool, bool, bool]) -> torch.cuda.CUDAGraph | None:
        """The CUDA graph of one switch mode; None (and eager launches from then on) if capture fails."""
        self._launch_all(mode, scratch=True)  # compile and load every kernel variant first
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                self._launch_all(mode)
        except RuntimeError as err:  # still correct without the graph, only slower
            warnings.warn(f"SwitchPlan: CUDA graph capture failed ({err}); launching eagerly")
            self._graphs_on = False
            return None
        self._graphs[mode] = graph
        return graph

    def _launch_all(self, mode: tuple[bool, bool, bool], scratch: bool = False) -> None:
        """Every block's launch; in reconstruct mode also the gap copies. scratch: write into
        same-alignment scratch tensors instead (warm-up without touching the weights)."""
        in_place, has_to, has_from = mode
        slot = 0
        for live, base, lay in self._items:
            out = _scratch_like(live) if scratch else live
            src = out if in_place else base
            for b in lay.blocks:
                _launch_block(out, src, lay, b, _Keys(has_to, has_from, row=self._table[slot],
                                                      gauss=self._noise == GAUSSIAN))
                slot += 1
            if not in_place and not scratch:
                copy_gaps_(live, base, lay)
