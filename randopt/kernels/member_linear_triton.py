"""A linear layer for M members at once on one base weight: Y[m] = X[m] @ bf16(W0 + sigma_m * N_m)^T, the noise
N_m generated inside the matmul's tiles, so no member's weight is ever stored and W0 is read once for all M.

Why: a decode step of today's engines reads one materialised weight copy per member; here every member's rows
share the one read of W0 (the M programs of one weight tile run side by side and meet in L2), and member m's
effective tile is made in registers from W0's tile and the counter hash of randopt/kernels/noise_ref.py at the
logical tensor's indices. The cost moves from memory to the ALUs: every member's tile is hashed on every call
(two fmix32 rounds an element, one member), which is what bench/roofline/ measures against the bandwidth floor.

Bit-exactness: the effective weight is the reference switch's to the bit, for Rademacher and Gaussian noise
(member_linear_ref.py; tests/test_member_linear_triton.py, and on a GPU test_kernel_cuda's member tests and
bench/roofline/fused_linear_bench.py). It uses the switch kernels' own device function (_noise_step, the key
folding k1 = ka ^ (ka >> 16)), so the two cannot drift apart; Gaussian launches compile without FMA contraction
for the same reason as theirs (the product sigma*G is rounded before the add). The effective weight is rounded to
nearest even in registers (by hand on the fp32 bits under the interpreter, whose bf16 conversion truncates; the
bf16 value is then exact in any conversion) before the tensor-core product, and EMIT_W makes the same kernel
store it, which is how the tests read it.

Layouts: a local weight of a LocalLayout whose blocks each span the full local width (replicated, column-
parallel, row-parallel, fused qkv and gate_up, vocab-parallel with padding rows): each local row n knows its block
(slot: the logical tensor's name, so its keys per member) and the logical index of its element 0, and element
(n, k) has logical index row_base[n] + k, exactly the switch's. Rows no block covers (padding) and base members
(seed None or sigma 0) read an all-zero key row: their step is +-0, so their weight is W0 to the bit.

Products: fp32 accumulation over K in BLOCK_K steps (tl.dot), plus an optional per-member bias [M, N] in fp32,
rounded once to X's dtype. Not bit-equal to cuBLAS (another summation order): equal within bf16 tolerance.

Ragged rows: X [rows, K] sorted by member, with segment offsets [M + 1], as a grouped (mixture-of-experts) GEMM
whose expert is the member: continuous batching drops a finished answer's rows and admits a new member's prompt
rows, so members hold different numbers of rows (docs/member_batched_engine.md, step 1). The grid is (member,
n-tile, r-tile of the longest segment); programs past their segment's end return at once. X [M, rows, K] is the
equal-rows case of the same launch (offsets m * rows).

Packed signs (MemberLinear(signs=True), Rademacher only): the roofline (bench/roofline/README.md) says re-hashing
every element for every member every call costs more ALU time than reading a materialised copy costs bandwidth, so
the kernel can instead read each member's signs, drawn once by _pack_signs_kernel with the same hash (1 bit an
element: 1/16 of a bf16 copy) and kept for the group's calls. Same weights to the bit; the tests check both paths.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
import triton
import triton.language as tl

from randopt.kernels import perturb_triton as _switch
from randopt.kernels.layout import LocalLayout
from randopt.kernels.member_linear_ref import Member, is_base, weight_layout
from randopt.kernels.noise_kinds import GAUSSIAN, RADEMACHER, check_kind
from randopt.kernels.noise_ref import gaussian_table_bits, tensor_keys

_noise_step = _switch._noise_step  # the switch kernels' device functions: one definition of a member's step
_mixed = _switch._mixed


@triton.jit
def _rne_bf16_by_hand(y, BF16_BY_HAND: tl.constexpr):
    """BF16_BY_HAND: fp32 y rounded to nearest even at bf16's precision on its bits (NaN -> 0x7FC0, as torch),
    still as an fp32 that bf16 holds exactly, so the conversion after it rounds nothing (the interpreter's bf16
    conversion truncates). Else y itself, for the hardware's nearest-even conversion."""
    if BF16_BY_HAND:
        b = y.to(tl.uint32, bitcast=True)
        r = (b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000
        r = tl.where(y != y, 0x7FC00000, r)
        y = r.to(tl.float32, bitcast=True)
    return y


@triton.jit
def _member_linear_kernel(x_ptr, w_ptr, y_ptr, weff_ptr, bias_ptr, keys_ptr, table_ptr, row_slot_ptr, row_base_ptr,
                          signs_ptr, seg_ptr, N, K, n_slots, words, stride_xr, stride_wn, stride_yr,
                          GAUSS: tl.constexpr, SIGNS: tl.constexpr, UNPACK_GATHER: tl.constexpr,
                          HAS_BIAS: tl.constexpr, EMIT_W: tl.constexpr,
                          BF16_BY_HAND: tl.constexpr, Y_BF16_BY_HAND: tl.constexpr, DOT_F32: tl.constexpr,
                          BLOCK_R: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """Program (m, n-tile, r-tile): rows [seg[m] + r-tile * BLOCK_R, +BLOCK_R) of member m's segment of X (rows
    sorted by member, segment m = rows seg[m] .. seg[m+1] - 1, as a grouped / MoE GEMM with the member as the
    expert) times the member's effective rows n of the weight. The grid's r-tiles cover the longest segment; a
    program past its own segment's end returns at once (segments of 0 rows included), so a member costs the r-tiles
    its rows need. Members vary fastest in the grid, so the M programs that read one W0 tile run together. SIGNS:
    Rademacher signs read from the member's packed words (_pack_signs_kernel, the same hash drawn once) instead of
    hashed here."""
    m = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_r = tl.program_id(2)
    seg_start = tl.load(seg_ptr + m)
    seg_end = tl.load(seg_ptr + m + 1)
    row0 = seg_start + pid_r * BLOCK_R
    idle = row0 >= seg_end
    if EMIT_W:  # r-tile 0 writes the member's weight even for a segment of no rows (the tests read every member's)
        idle = idle & (pid_r > 0)
    if idle:
        return
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_r = row0 + tl.arange(0, BLOCK_R)
    n_ok = offs_n < N
    r_ok = offs_r < seg_end
    # each weight row's logical tensor (its member keys) and the logical index of its element 0
    slot = tl.load(row_slot_ptr + offs_n, mask=n_ok, other=0)
    row_base = tl.load(row_base_ptr + offs_n, mask=n_ok, other=0).to(tl.uint32)
    key_row = keys_ptr + (m * n_slots + slot) * 4
    k1 = tl.load(key_row + 0, mask=n_ok, other=0)[:, None]
    kb = tl.load(key_row + 1, mask=n_ok, other=0)[:, None]
    sb = tl.load(key_row + 2, mask=n_ok, other=0)[:, None]
    x_rows = x_ptr + offs_r.to(tl.int64)[:, None] * stride_xr
    w_rows = w_ptr + offs_n.to(tl.int64)[:, None] * stride_wn
    acc = tl.full((BLOCK_R, BLOCK_N), 0.0, tl.float32)
    for k0 in range(0, K, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        k_ok = offs_k < K
        w_mask = n_ok[:, None] & k_ok[None, :]
        w0 = tl.load(w_rows + offs_k[None, :], mask=w_mask, other=0.0)
        if SIGNS:  # word k // 32, bit k % 32 of member m's row n: 1 where R = -1 (BLOCK_K % 32 == 0)
            sign_rows = signs_ptr + (m.to(tl.int64) * N + offs_n.to(tl.int64))[:, None] * words
            if UNPACK_GATHER:  # each element loads its own word (32 lanes share an address: L1 broadcasts it)
                packed = tl.load(sign_rows + (offs_k // 32)[None, :], mask=w_mask, other=0).to(tl.uint32, bitcast=True)
                negative = (packed >> (offs_k % 32).to(tl.uint32)[None, :]) & 1
            else:  # one load a word, its 32 bits spread by a reshape (which may cost a layout conversion)
                offs_w = k0 // 32 + tl.arange(0, BLOCK_K // 32)
                packed = tl.load(sign_rows + offs_w[None, :], mask=n_ok[:, None] & (offs_w < words)[None, :],
                                 other=0).to(tl.uint32, bitcast=True)
                bits = (packed[:, :, None] >> tl.arange(0, 32).to(tl.uint32)[None, None, :]) & 1
                negative = tl.reshape(bits, (BLOCK_N, BLOCK_K))
            step = ((negative << 31) | sb.to(tl.uint32, bitcast=True)).to(tl.float32, bitcast=True)
        else:
            idx = row_base[:, None] + offs_k.to(tl.uint32)[None, :]
            step = _noise_step(idx, k1, kb, sb, table_ptr, GAUSS)
        w = _rne_bf16_by_hand(w0.to(tl.float32) + step, BF16_BY_HAND).to(w0.dtype)
        if EMIT_W:
            if pid_r == 0:
                w_out = weff_ptr + (m.to(tl.int64) * N + offs_n.to(tl.int64))[:, None] * K + offs_k[None, :]
                tl.store(w_out, w, mask=w_mask)
        x = tl.load(x_rows + offs_k[None, :], mask=r_ok[:, None] & k_ok[None, :], other=0.0)
        if DOT_F32:  # the interpreter's bf16 dot is wrong (Triton 3.9), and fp32 X (a model computing in fp32 over
            # bf16 weights) multiplies in fp32: fp32 holds every bf16 product exactly; "ieee", never tf32
            acc = tl.dot(x.to(tl.float32), tl.trans(w.to(tl.float32)), acc, input_precision="ieee")
        else:
            acc = tl.dot(x, tl.trans(w), acc)
    if HAS_BIAS:
        acc += tl.load(bias_ptr + m.to(tl.int64) * N + offs_n, mask=n_ok, other=0.0).to(tl.float32)[None, :]
    y_out = y_ptr + offs_r.to(tl.int64)[:, None] * stride_yr + offs_n[None, :]
    tl.store(y_out, _rne_bf16_by_hand(acc, Y_BF16_BY_HAND).to(y_ptr.dtype.element_ty), mask=r_ok[:, None] & n_ok[None, :])


@triton.jit
def _pack_signs_kernel(signs_ptr, keys_ptr, row_slot_ptr, row_base_ptr, N, K, n_slots, words,
                       BLOCK_N: tl.constexpr, BLOCK_W: tl.constexpr):
    """Member m's Rademacher signs of rows n, words w: bit j of word w is 1 where R(k = 32 w + j) = -1, from the
    switch's own hash at the logical index (bit 31 of h; _mixed skips a last xor-shift that leaves it alone); bits
    past K are 0. Drawn once a member group, read by every later call in place of the hash."""
    m = tl.program_id(0)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_w = tl.program_id(2) * BLOCK_W + tl.arange(0, BLOCK_W)
    n_ok = offs_n < N
    slot = tl.load(row_slot_ptr + offs_n, mask=n_ok, other=0)
    row_base = tl.load(row_base_ptr + offs_n, mask=n_ok, other=0).to(tl.uint32)
    key_row = keys_ptr + (m * n_slots + slot) * 4
    k1 = tl.load(key_row + 0, mask=n_ok, other=0).to(tl.uint32, bitcast=True)[:, None, None]
    kb = tl.load(key_row + 1, mask=n_ok, other=0).to(tl.uint32, bitcast=True)[:, None, None]
    j = tl.arange(0, 32)
    k = offs_w[:, None] * 32 + j[None, :]
    h = _mixed(row_base[:, None, None] + k.to(tl.uint32)[None, :, :], k1, kb)
    negative = (h >> 31) & (k < K).to(tl.uint32)[None, :, :]
    # distinct bits: their sum is their or. tl.reduce (a builtin) with tl.sum's own combine rather than tl.sum: tl.sum
    # is a jit'd helper of triton.language, compiled-mode if triton was imported before TRITON_INTERPRET was set (as
    # torch's own Triton ops now do), which the interpreter cannot call (tests/test_kernel_triton.py: the kernels use
    # builtins only); the interpreter still takes its numpy sum for this combine, and a compiled launch is tl.sum's
    packed = tl.reduce(negative << j.to(tl.uint32)[None, None, :], 2, tl.standard._sum_combine)
    w_ok = offs_w < words
    out = signs_ptr + (m.to(tl.int64) * N + offs_n.to(tl.int64))[:, None] * words + offs_w[None, :]
    tl.store(out, packed.to(tl.int32, bitcast=True), mask=n_ok[:, None] & w_ok[None, :])


@triton.jit
def _member_embedding_kernel(out_ptr, w_ptr, ids_ptr, row_member_ptr, keys_ptr, table_ptr, H, stride_wn, stride_out,
                             GAUSS: tl.constexpr, BF16_BY_HAND: tl.constexpr, BLOCK_H: tl.constexpr):
    """Program (token row r, h-tile): row ids[r] of member row_member[r]'s embedding, W0's row plus the member's
    noise at the logical indices ids[r] * H + h, made only for the rows read (a vocab of 151,936 rows is never
    perturbed whole). Slot 0 of the member's keys is the tensor's; a base member's keys are zero (step +-0)."""
    r = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    ok = offs < H
    token = tl.load(ids_ptr + r).to(tl.int64)
    m = tl.load(row_member_ptr + r).to(tl.int64)
    key_row = keys_ptr + m * 8   # [M, 2 slots, 4]: slot 0 is the tensor, slot 1 the (unused) padding slot
    k1 = tl.load(key_row + 0)
    kb = tl.load(key_row + 1)
    sb = tl.load(key_row + 2)
    idx = (token * H).to(tl.uint32) + offs.to(tl.uint32)
    w0 = tl.load(w_ptr + token * stride_wn + offs, mask=ok, other=0.0)
    w = _rne_bf16_by_hand(w0.to(tl.float32) + _noise_step(idx, k1, kb, sb, table_ptr, GAUSS), BF16_BY_HAND)
    tl.store(out_ptr + r.to(tl.int64) * stride_out + offs, w.to(w0.dtype).to(out_ptr.dtype.element_ty), mask=ok)


# ---------------------------------------------------------------------------------------------
# Host side

INTERPRETED = type(_member_linear_kernel).__name__ == "InterpretedFunction"
_DTYPES = (torch.bfloat16, torch.float16)


class LaunchConfig:
    """Tile sizes (module-wide; bench/roofline/fused_linear_bench.py sweeps them). block_r is the most rows of
    one member a program takes: more rows than that split into r-tiles, each hashing the member's tile again."""
    block_n = 64
    block_k = 64
    max_block_r = 64
    num_warps = 4
    num_stages = 3
    unpack_gather = False   # packed signs: a word per element from L1 (True) or a word per load and a reshape


def row_tables(layout: LocalLayout) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Per local row: its slot (the index of its block's logical tensor in the returned names; the extra last
    slot, len(names), is padding: all-zero keys) and the logical index of its element 0 (int64).

    Every block must span the local tensor's full width, as in vLLM's layouts; a block over part of a row
    would need per-column slots."""
    rows, cols = layout.rows, layout.cols
    names = [b.name for b in layout.blocks]
    slot = np.full(rows, len(names), dtype=np.int32)
    base = np.zeros(rows, dtype=np.int64)
    for s, b in enumerate(layout.blocks):
        if b.local_col != 0 or b.width != cols:
            raise ValueError(f"{b.name}: a block over local columns [{b.local_col}, {b.local_col + b.width}) of {cols}; "
                             "the member linear needs blocks spanning whole local rows")
        r = np.arange(b.nrows, dtype=np.int64)
        slot[b.local_row:b.local_row + b.nrows] = s
        base[b.local_row:b.local_row + b.nrows] = (b.logical_row + r) * b.logical_cols + b.logical_col
    return slot, base, names


def member_keys(members: Sequence[Member], names: Sequence[str], noise: str) -> np.ndarray:
    """int32 [M, len(names) + 1, 4]: per member and logical tensor the kernel's (k1, kb, sigma bits, 0), with
    k1 = ka ^ (ka >> 16) as the switch kernels fold it; base members and the padding slot all zero."""
    table = np.zeros((len(members), len(names) + 1, 4), dtype=np.uint32)
    for m, (seed, sigma) in enumerate(members):
        if is_base((seed, sigma)):
            continue
        sbits = _switch._sigma_bits(sigma)
        for s, name in enumerate(names):
            ka, kb = tensor_keys(seed, name, noise)
            table[m, s, :3] = (ka ^ (ka >> 16), kb, sbits)
    return table.view(np.int32)


class MemberLinear:
    """One perturbed linear weight (local tensor ``base`` [N, K] of ``layout``; None: the whole logical tensor
    named ``name``) for groups of M members. The row tables are built once; set_members writes a group's keys
    into a device table in place (a CUDA graph of the forward replays with the new members), and calls compute
    Y [M, rows, N] from X [M, rows, K], or Y [rows, N] from X [rows, K] sorted by member with segment offsets
    [M + 1] (ragged: each member its own number of rows, none included).

    signs=True (Rademacher only): set_members also draws each member's signs once into packed words (1 bit an
    element, M x N x K / 8 bytes) and calls read them in place of hashing every element every call: the same bits
    (the same hash), the ALU work of the hash moved out of the step (bench/roofline/README.md). A Gaussian draw is
    16 bits, as large as the bf16 weight itself, so it has no packed form worth keeping."""

    def __init__(self, base: torch.Tensor, layout: LocalLayout | None = None, name: str | None = None,
                 noise: str = RADEMACHER, signs: bool = False) -> None:
        if base.dim() != 2 or base.dtype not in _DTYPES or not base.is_contiguous():
            raise ValueError(f"base must be a contiguous 2-D bf16/fp16 weight, got {tuple(base.shape)} {base.dtype}")
        self.layout, self.noise = weight_layout(base, layout, name, noise, signs)
        self.base, self.signs = base, signs
        self._words = triton.cdiv(base.shape[1], 32)
        self._signs: torch.Tensor | None = None
        slot, row_base, self.names = row_tables(self.layout)
        self._row_slot = torch.from_numpy(slot).to(base.device)
        self._row_base = torch.from_numpy(row_base).to(base.device)
        self._table = (torch.from_numpy(gaussian_table_bits().view(np.int32).copy()).to(base.device)
                       if self.noise == GAUSSIAN else self._row_slot)  # the latter never read: a placeholder pointer
        self._keys: torch.Tensor | None = None
        self.last_launch = None
        self.members: list[Member] = []

    def set_members(self, members: Sequence[Member]) -> None:
        """This group's keys (host sha256 per member and tensor, then one upload into the same device table)."""
        keys = torch.from_numpy(member_keys(members, self.names, self.noise))
        if self._keys is None or self._keys.shape != keys.shape:
            self._keys = keys.to(self.base.device)
        else:
            self._keys.copy_(keys)
        self.members = list(members)
        if self.signs:
            self.pack_signs()

    def pack_signs(self) -> None:
        """Draw the group's signs into the packed words (one launch; the same tensor when M is unchanged)."""
        members, (n, _) = self._keys.shape[0], self.base.shape
        if self._signs is None or self._signs.shape[0] != members:
            self._signs = torch.empty((members, n, self._words), dtype=torch.int32, device=self.base.device)
        if members == 0:
            return
        block_n, block_w = 32, 8
        grid = (members, triton.cdiv(n, block_n), triton.cdiv(self._words, block_w))
        _pack_signs_kernel[grid](self._signs, self._keys, self._row_slot, self._row_base, n, self.base.shape[1],
                                 self._keys.shape[1], self._words, BLOCK_N=block_n, BLOCK_W=block_w, num_warps=4)

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None = None,
                 weights_out: torch.Tensor | None = None, offsets: torch.Tensor | None = None,
                 max_rows: int | None = None) -> torch.Tensor:
        """Y for X, in X's dtype: W0's, or fp32 (a model that computes in fp32 over bf16 weights: the effective
        weight is still made and rounded in W0's dtype, then widened exactly, and the product is an fp32 one).

        Two forms of X:
        - [M, rows, K], every member the same rows: Y [M, rows, N] (the form of a static batch);
        - [rows, K] sorted by member with ``offsets`` [M + 1] (int, on X's device; member m's rows are
          offsets[m] .. offsets[m+1] - 1, a member may have none): Y [rows, N]. The rows of finished answers
          leave and a new member's prompt rows join without any member's rows moving to another's weights.
          ``max_rows`` bounds the longest segment (the grid's r-tiles); without it the host reads the offsets,
          which on a GPU waits for them (a CUDA graph must pass it).

        bias [M, N] or None; weights_out [M, N, K] (W0's dtype): the kernel also stores each member's effective
        weight there (a debug and test path: the same kernel, its weight tiles written out)."""
        if self._keys is None:
            raise ValueError("set_members first")
        n, k = self.base.shape
        members = self._keys.shape[0]
        if x.dtype not in (self.base.dtype, torch.float32):
            raise ValueError(f"x is {x.dtype}: needs W0's {self.base.dtype} or float32")
        if offsets is None:
            if x.dim() != 3 or x.shape[0] != members or x.shape[2] != k:
                raise ValueError(f"x {tuple(x.shape)}: needs [{members}, rows, {k}] (or [rows, {k}] with offsets)")
            rows = x.shape[1]
            flat = x.reshape(members * rows, k)   # a view when X is contiguous: the equal-rows case of the segments
            offsets = torch.arange(members + 1, dtype=torch.int32, device=x.device) * rows
            return self._launch(flat, offsets, rows, bias, weights_out).view(members, rows, n)
        if x.dim() != 2 or x.shape[1] != k:
            raise ValueError(f"x {tuple(x.shape)}: with offsets it needs [rows, {k}]")
        if offsets.dim() != 1 or offsets.shape[0] != members + 1 or offsets.dtype.is_floating_point:
            raise ValueError(f"offsets {tuple(offsets.shape)}/{offsets.dtype}: needs [{members + 1}] integers")
        if offsets.device != x.device:
            raise ValueError(f"offsets on {offsets.device}, x on {x.device}")
        if max_rows is None or offsets.device.type == "cpu":
            lengths = offsets[1:] - offsets[:-1]
            if int(offsets[0]) != 0 or int(offsets[-1]) != x.shape[0] or bool((lengths < 0).any()):
                raise ValueError(f"offsets must rise from 0 to x's {x.shape[0]} rows, got {offsets.tolist()}")
            longest = int(lengths.max()) if members else 0
            if max_rows is not None and longest > max_rows:
                raise ValueError(f"a segment of {longest} rows is longer than max_rows={max_rows}")
            max_rows = longest if max_rows is None else max_rows
        return self._launch(x, offsets.to(torch.int32), max_rows, bias, weights_out)

    def _launch(self, x: torch.Tensor, offsets: torch.Tensor, max_rows: int, bias: torch.Tensor | None,
                weights_out: torch.Tensor | None) -> torch.Tensor:
        """One launch over the segments: grid (member, n-tile, r-tile of the longest segment)."""
        n, k = self.base.shape
        members = self._keys.shape[0]
        if x.stride(1) != 1:
            x = x.contiguous()
        if bias is not None and (tuple(bias.shape) != (members, n) or not bias.is_contiguous()):
            raise ValueError(f"bias {tuple(bias.shape)}: needs a contiguous [{members}, {n}]")
        if weights_out is not None and (tuple(weights_out.shape) != (members, n, k) or weights_out.dtype != self.base.dtype
                                        or not weights_out.is_contiguous()):
            raise ValueError(f"weights_out needs a contiguous [{members}, {n}, {k}] {self.base.dtype}")
        y = torch.empty((x.shape[0], n), dtype=x.dtype, device=x.device)
        block_r = min(LaunchConfig.max_block_r, max(16, triton.next_power_of_2(max(max_rows, 1))))
        # r-tiles: those of the longest segment, and one (r-tile 0) for weights_out even when no member has rows
        r_tiles = max(triton.cdiv(max_rows, block_r), 1 if weights_out is not None else 0)
        if r_tiles == 0 or members == 0:
            return y
        block_n = LaunchConfig.block_n
        if self.signs and LaunchConfig.block_k % 32:
            raise ValueError(f"packed signs need block_k a multiple of 32, got {LaunchConfig.block_k}")
        grid = (members, triton.cdiv(n, block_n), r_tiles)
        gauss = self.noise == GAUSSIAN
        # compiled: Triton's kernel object, whose .asm["ptx"] the CUDA checks read (no fma in a Gaussian launch)
        self.last_launch = _member_linear_kernel[grid](
            x, self.base, y, weights_out if weights_out is not None else y, bias if bias is not None else y,
            self._keys, self._table, self._row_slot, self._row_base, self._signs if self.signs else self._row_slot,
            offsets, n, k, self._keys.shape[1], self._words, x.stride(0), self.base.stride(0), y.stride(0),
            GAUSS=gauss, SIGNS=self.signs, UNPACK_GATHER=LaunchConfig.unpack_gather, HAS_BIAS=bias is not None,
            EMIT_W=weights_out is not None, BF16_BY_HAND=INTERPRETED and self.base.dtype == torch.bfloat16,
            Y_BF16_BY_HAND=INTERPRETED and y.dtype == torch.bfloat16,
            DOT_F32=INTERPRETED or x.dtype == torch.float32,
            BLOCK_R=block_r, BLOCK_N=block_n, BLOCK_K=LaunchConfig.block_k,
            num_warps=LaunchConfig.num_warps, num_stages=LaunchConfig.num_stages,
            **({"enable_fp_fusion": False} if gauss else {}))
        return y


class MemberEmbedding:
    """An embedding [vocab, H] (one whole logical tensor ``name``) for groups of M members: calls gather the rows
    ids of each row's member, perturbed only there (_member_embedding_kernel), in W0's dtype or widened to
    ``out_dtype`` (exact). Bit-equal to member_linear_ref.member_embedding_reference."""

    def __init__(self, base: torch.Tensor, name: str, noise: str = RADEMACHER) -> None:
        if base.dim() != 2 or base.dtype not in _DTYPES or base.stride(1) != 1:
            raise ValueError(f"base must be a 2-D bf16/fp16 embedding with unit column stride, got "
                             f"{tuple(base.shape)} {base.dtype}")
        self.base, self.name, self.noise = base, name, check_kind(noise)
        self._table = (torch.from_numpy(gaussian_table_bits().view(np.int32).copy()).to(base.device)
                       if self.noise == GAUSSIAN else torch.zeros(1, dtype=torch.int32, device=base.device))
        self._keys: torch.Tensor | None = None
        self.members: list[Member] = []

    def set_members(self, members: Sequence[Member]) -> None:
        keys = torch.from_numpy(member_keys(members, [self.name], self.noise))
        if self._keys is None or self._keys.shape != keys.shape:
            self._keys = keys.to(self.base.device)
        else:
            self._keys.copy_(keys)
        self.members = list(members)

    def __call__(self, ids: torch.Tensor, row_member: torch.Tensor, out_dtype: torch.dtype | None = None) -> torch.Tensor:
        if self._keys is None:
            raise ValueError("set_members first")
        if ids.shape != row_member.shape:
            raise ValueError(f"ids {tuple(ids.shape)} and row_member {tuple(row_member.shape)} differ")
        hidden = self.base.shape[1]
        flat_ids, flat_m = ids.reshape(-1).contiguous(), row_member.reshape(-1).contiguous()
        out = torch.empty((flat_ids.shape[0], hidden), dtype=out_dtype or self.base.dtype, device=self.base.device)
        if flat_ids.numel():
            block_h = min(1024, triton.next_power_of_2(hidden))
            gauss = self.noise == GAUSSIAN
            _member_embedding_kernel[(flat_ids.shape[0], triton.cdiv(hidden, block_h))](
                out, self.base, flat_ids, flat_m, self._keys, self._table, hidden, self.base.stride(0), out.stride(0),
                GAUSS=gauss, BF16_BY_HAND=INTERPRETED and self.base.dtype == torch.bfloat16, BLOCK_H=block_h,
                num_warps=4, **({"enable_fp_fusion": False} if gauss else {}))
        return out.view(*ids.shape, hidden)


def member_linear_triton(x: torch.Tensor, base: torch.Tensor, members: Sequence[Member],
                         layout: LocalLayout | None = None, name: str | None = None, noise: str = RADEMACHER,
                         bias: torch.Tensor | None = None, weights_out: torch.Tensor | None = None,
                         signs: bool = False, offsets: torch.Tensor | None = None) -> torch.Tensor:
    """One call of MemberLinear (builds its tables each time: for tests and one-off use)."""
    linear = MemberLinear(base, layout, name, noise, signs)
    linear.set_members(members)
    return linear(x, bias, weights_out, offsets)
