"""Where the elements of a sharded or fused local tensor sit in the logical (checkpoint) tensors.

The noise of an element (Rademacher or Gaussian) depends only on its logical tensor's name and its
row-major index there (randopt/kernels/noise_ref.py), so a local tensor is perturbed through a description
of that mapping:

* a local tensor is viewed as 2-D: (shape[0], prod(shape[1:])); a 1-D tensor is (n, 1);
* a ``Block`` says that local rows [local_row, +nrows) x local columns [local_col, +ncols) hold
  logical rows [logical_row, +nrows) x columns [logical_col, +ncols) of the logical tensor ``name``
  (itself viewed 2-D the same way), so local (r, c) has the logical index
  (logical_row + r) * logical_cols + logical_col + c;
* local elements that no block covers (vocab padding rows) are not perturbed: they stay base.

The helpers below build the layouts vLLM uses for tensor parallelism (TP): column-parallel row
ranges, row-parallel column ranges, vocab-parallel embeddings with padding rows, and the fused
qkv_proj (q, k, v row blocks, each sharded, kv heads replicated when TP > kv heads) and
gate_up_proj (gate, up). The pure-torch reference for a local tensor is here too; the Triton one is
randopt/kernels/perturb_triton.py.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import torch

from randopt.kernels.noise_kinds import RADEMACHER
from randopt.kernels.noise_ref import check_logical_numel, delta_step, noise_step, tensor_keys

# Local elements per reference chunk: bounds the int64 index temporaries.
_CHUNK = 1 << 22


def as_2d(shape: Sequence[int]) -> tuple[int, int]:
    """(rows, cols) of the 2-D view of a tensor shape: (shape[0], prod(shape[1:])), 1-D -> (n, 1)."""
    if len(shape) == 0:
        return 1, 1
    return int(shape[0]), int(math.prod(shape[1:]))


@dataclass(frozen=True)
class Block:
    """Local rows [local_row, +nrows) x cols [local_col, +ncols) = the same-size window of logical
    tensor ``name`` at logical row ``logical_row``, column ``logical_col``. ncols=None: full width."""

    name: str
    logical_shape: tuple[int, ...]
    local_row: int
    logical_row: int
    nrows: int
    local_col: int = 0
    logical_col: int = 0
    ncols: int | None = None

    @property
    def logical_cols(self) -> int:
        return as_2d(self.logical_shape)[1]

    @property
    def width(self) -> int:
        return self.logical_cols if self.ncols is None else self.ncols

    @property
    def full_rows(self) -> bool:
        """Whole logical rows: the block's logical indices are one contiguous range."""
        return self.logical_col == 0 and self.width == self.logical_cols


@dataclass(frozen=True)
class LocalLayout:
    """A local tensor of ``shape`` made of ``blocks`` (non-overlapping); the rest stays base."""

    shape: tuple[int, ...]
    blocks: tuple[Block, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        object.__setattr__(self, "blocks", tuple(self.blocks))
        self._validate()

    @property
    def rows(self) -> int:
        return as_2d(self.shape)[0]

    @property
    def cols(self) -> int:
        return as_2d(self.shape)[1]

    def _validate(self) -> None:
        for b in self.blocks:
            lrows, lcols = as_2d(b.logical_shape)
            check_logical_numel(b.name, lrows * lcols)
            if min(b.local_row, b.logical_row, b.local_col, b.logical_col, b.nrows, b.width) < 0:
                raise ValueError(f"{b}: negative offset or size")
            if b.local_row + b.nrows > self.rows or b.local_col + b.width > self.cols:
                raise ValueError(f"{b}: outside the local tensor {self.shape}")
            if b.logical_row + b.nrows > lrows or b.logical_col + b.width > lcols:
                raise ValueError(f"{b}: outside its logical tensor {b.logical_shape}")
        for r0, r1, spans in self._bands():
            spans = sorted(spans)
            for (a0, a1), (b0, _) in zip(spans, spans[1:]):
                if b0 < a1:
                    raise ValueError(f"blocks overlap in local rows [{r0}, {r1}), columns [{b0}, {a1})")

    def _bands(self) -> list[tuple[int, int, list[tuple[int, int]]]]:
        """Row bands between block edges, each with the column spans of the blocks covering it."""
        edges = sorted({0, self.rows} | {e for b in self.blocks for e in (b.local_row, b.local_row + b.nrows)})
        bands = []
        for r0, r1 in zip(edges, edges[1:]):
            spans = [(b.local_col, b.local_col + b.width) for b in self.blocks
                     if b.nrows and b.local_row <= r0 and r1 <= b.local_row + b.nrows]
            bands.append((r0, r1, spans))
        return bands

    def gaps(self) -> list[tuple[int, int, int, int]]:
        """Uncovered rectangles (row0, row1, col0, col1): these local elements stay base."""
        return list(self._gaps)

    @cached_property
    def _gaps(self) -> tuple[tuple[int, int, int, int], ...]:  # computed once: used every switch
        out = []
        for r0, r1, spans in self._bands():
            c = 0
            for s0, s1 in sorted(spans) + [(self.cols, self.cols)]:
                if s0 > c:
                    out.append((r0, r1, c, s0))
                c = max(c, s1)
        return tuple(out)


# ---------------------------------------------------------------------------------------------
# vLLM's tensor-parallel layouts


def _split(n: int, tp: int, what: str) -> int:
    if tp < 1 or n % tp:
        raise ValueError(f"{what}: {n} does not split evenly over tp={tp}")
    return n // tp


def _check_rank(tp: int, rank: int) -> None:
    if not 0 <= rank < tp:
        raise ValueError(f"rank {rank} outside tp={tp}")


def replicated(name: str, shape: Sequence[int]) -> LocalLayout:
    """The whole logical tensor (TP=1, norms, row-parallel biases)."""
    rows, _ = as_2d(shape)
    return LocalLayout(tuple(shape), (Block(name, tuple(shape), 0, 0, rows),))


def column_parallel(name: str, shape: Sequence[int], tp: int, rank: int) -> LocalLayout:
    """ColumnParallelLinear: output rows split evenly, rank r holds rows [r*n/tp, (r+1)*n/tp)."""
    return merged_column_parallel([(name, shape)], tp, rank)


def row_parallel(name: str, shape: Sequence[int], tp: int, rank: int) -> LocalLayout:
    """RowParallelLinear: input columns split evenly; a 1-D tensor (its bias) is replicated."""
    _check_rank(tp, rank)
    shape = tuple(shape)
    if len(shape) == 1:
        return replicated(name, shape)
    if len(shape) != 2:
        raise ValueError(f"{name}: row-parallel needs a 2-D weight, got {shape}")
    rows, cols = shape
    per = _split(cols, tp, name)
    return LocalLayout((rows, per), (Block(name, shape, 0, 0, rows, 0, rank * per, per),))


def merged_column_parallel(parts: Sequence[tuple[str, Sequence[int]]], tp: int, rank: int) -> LocalLayout:
    """MergedColumnParallelLinear (gate_up_proj = [gate; up]): each part's rows split over TP,
    this rank's shards stacked in order."""
    _check_rank(tp, rank)
    return _stack([(name, tuple(shape), rank * _split(shape[0], tp, name), _split(shape[0], tp, name))
                   for name, shape in parts])


def qkv_parallel(q: tuple[str, Sequence[int]], k: tuple[str, Sequence[int]], v: tuple[str, Sequence[int]],
                 num_heads: int, num_kv_heads: int, tp: int, rank: int) -> LocalLayout:
    """QKVParallelLinear: [q heads of this rank; k heads; v heads]. With tp >= num_kv_heads each rank
    holds one kv head, head rank // (tp // num_kv_heads) (replicated over tp // num_kv_heads ranks),
    as vLLM does. Works for the weights and the 1-D biases (head_dim = q rows / num_heads)."""
    _check_rank(tp, rank)
    head_dim = _split(q[1][0], num_heads, q[0])
    q_rows = _split(num_heads, tp, "num_heads") * head_dim
    if tp >= num_kv_heads:
        kv_heads, kv_shard = 1, rank // _split(tp, num_kv_heads, "tp over kv heads")
    else:
        kv_heads, kv_shard = _split(num_kv_heads, tp, "num_kv_heads"), rank
    kv_rows = kv_heads * head_dim
    return _stack([(q[0], tuple(q[1]), rank * q_rows, q_rows),
                   (k[0], tuple(k[1]), kv_shard * kv_rows, kv_rows),
                   (v[0], tuple(v[1]), kv_shard * kv_rows, kv_rows)])


def vocab_parallel(name: str, shape: Sequence[int], tp: int, rank: int, padding: int = 64) -> LocalLayout:
    """VocabParallelEmbedding / ParallelLMHead: the vocab is padded to a multiple of ``padding``
    (vLLM's default 64) and split evenly; rows past the real vocab are padding and stay base."""
    _check_rank(tp, rank)
    shape = tuple(shape)
    vocab, _ = as_2d(shape)
    padded = -(-vocab // padding) * padding
    per = _split(padded, tp, f"{name} padded vocab")
    start = rank * per
    real = max(0, min(per, vocab - start))
    blocks = (Block(name, shape, 0, start, real),) if real else ()
    return LocalLayout((per,) + shape[1:], blocks)


def _stack(parts: Sequence[tuple[str, tuple[int, ...], int, int]]) -> LocalLayout:
    """Row blocks (name, logical shape, logical row, nrows) stacked from local row 0."""
    blocks, row = [], 0
    for name, shape, logical_row, nrows in parts:
        blocks.append(Block(name, shape, row, logical_row, nrows))
        row += nrows
    first = parts[0][1]
    for _, shape, _, _ in parts:
        if shape[1:] != first[1:]:
            raise ValueError(f"fused parts disagree on trailing dims: {shape} vs {first}")
    return LocalLayout((row,) + first[1:], tuple(blocks))


# ---------------------------------------------------------------------------------------------
# Pure-torch reference for a local tensor


def _block_index(b: Block, r0: int, r1: int, device: torch.device) -> torch.Tensor:
    """Logical indices (int64, (r1-r0, width)) of block rows r0..r1-1."""
    rows = torch.arange(b.logical_row + r0, b.logical_row + r1, dtype=torch.int64, device=device)
    cols = torch.arange(b.logical_col, b.logical_col + b.width, dtype=torch.int64, device=device)
    return rows[:, None] * b.logical_cols + cols[None, :]


def _check_local(live: torch.Tensor, src: torch.Tensor | None, layout: LocalLayout) -> None:
    if tuple(live.shape) != layout.shape:
        raise ValueError(f"local tensor {tuple(live.shape)} does not match its layout {layout.shape}")
    if src is not None and (src.shape != live.shape or src.dtype != live.dtype):
        raise ValueError(f"base {tuple(src.shape)}/{src.dtype} does not match live "
                         f"{tuple(live.shape)}/{live.dtype}")


def _apply_local_reference_(live: torch.Tensor, src: torch.Tensor, layout: LocalLayout,
                            to: tuple[int, float] | None, frm: tuple[int, float] | None, noise: str) -> None:
    """live[block] := rne(fp32(src[block]) + d) for every block, d as in noise_ref.delta_step."""
    live2, src2 = live.view(layout.rows, layout.cols), src.reshape(layout.rows, layout.cols)
    for b in layout.blocks:
        keys_to = tensor_keys(to[0], b.name, noise) if to else None
        keys_from = tensor_keys(frm[0], b.name, noise) if frm else None
        step = max(1, _CHUNK // max(1, b.width))
        for r0 in range(0, b.nrows, step):
            r1 = min(b.nrows, r0 + step)
            idx = _block_index(b, r0, r1, live.device)
            d = delta_step(noise_step(idx, keys_to, to[1], noise) if keys_to else None,
                           noise_step(idx, keys_from, frm[1], noise) if keys_from else None)
            rows = slice(b.local_row + r0, b.local_row + r1)
            cols = slice(b.local_col, b.local_col + b.width)
            live2[rows, cols] = (src2[rows, cols].to(torch.float32) + d).to(live.dtype)


def copy_gaps_(live: torch.Tensor, base: torch.Tensor, layout: LocalLayout) -> None:
    """Uncovered (padding) elements := base."""
    live2, base2 = live.view(layout.rows, layout.cols), base.reshape(layout.rows, layout.cols)
    for r0, r1, c0, c1 in layout._gaps:
        live2[r0:r1, c0:c1] = base2[r0:r1, c0:c1]


def reconstruct_local_reference_(live: torch.Tensor, base: torch.Tensor, seed: int, sigma: float,
                                 layout: LocalLayout, noise: str = RADEMACHER) -> None:
    """live := base + sigma * N at each element's logical (name, index); uncovered elements := base."""
    _check_local(live, base, layout)
    if not sigma > 0:
        raise ValueError(f"sigma must be > 0, got {sigma!r}")
    _apply_local_reference_(live, base, layout, (seed, sigma), None, noise)
    copy_gaps_(live, base, layout)


def delta_switch_local_reference_(live: torch.Tensor, layout: LocalLayout, seed_from: int | None,
                                  sigma_from: float, seed_to: int | None, sigma_to: float,
                                  noise: str = RADEMACHER) -> None:
    """In-place switch of a local tensor (see noise_ref.delta_switch_reference_); gaps untouched."""
    _check_local(live, None, layout)
    to = (seed_to, sigma_to) if seed_to is not None and sigma_to != 0 else None
    frm = (seed_from, sigma_from) if seed_from is not None and sigma_from != 0 else None
    if to or frm:
        _apply_local_reference_(live, live, layout, to, frm, noise)
