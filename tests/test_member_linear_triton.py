"""The fused member-batched linear (randopt/kernels/member_linear_triton.py) under the Triton interpreter:
each member's effective weight, as the kernel itself makes it, bit-equal to the reference switch's for both
noise kinds, several sigmas and seeds, base members and fused / sharded / padded layouts; and its products equal
to a matmul of the materialised weights within bf16 tolerance. Tiny shapes: the interpreter runs numpy.

The interpreted copy of the kernels comes from tests/support/member_linear_interpreted.py (shared with the
ragged and member-fused tests, so it is made once).
"""
from __future__ import annotations

import importlib.util

import pytest

torch = pytest.importorskip("torch")
if importlib.util.find_spec("triton") is None:
    pytest.skip("triton is not installed", allow_module_level=True)

from tests.support.member_linear_interpreted import ML  # noqa: E402

from randopt.kernels import layout as L  # noqa: E402
from randopt.kernels.member_linear_ref import effective_weights_reference, member_linear_reference  # noqa: E402

NOISES = ["rademacher", "gaussian"]


@pytest.fixture(autouse=True)
def _interpret(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(ML.LaunchConfig, "block_n", 16)   # tiny tiles: several n- and k-tiles on tiny shapes
    monkeypatch.setattr(ML.LaunchConfig, "block_k", 16)
    monkeypatch.setattr(ML.LaunchConfig, "max_block_r", 16)


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.equal(a.contiguous().view(torch.int16), b.contiguous().view(torch.int16))


def _randn(shape, seed, scale=1.0, dtype=torch.bfloat16) -> torch.Tensor:
    return (scale * torch.randn(shape, generator=torch.Generator().manual_seed(seed))).to(dtype)


def _run(base, layout, members, noise, rows=3, bias=False, dtype=torch.bfloat16):
    x = _randn((len(members), rows, base.shape[1]), 7, dtype=dtype)
    b = _randn((len(members), base.shape[0]), 8, dtype=dtype) if bias else None
    w = torch.empty((len(members), *base.shape), dtype=base.dtype)
    y = ML.member_linear_triton(x, base, members, layout=layout, noise=noise, bias=b, weights_out=w)
    return x, b, y, w


# members: seeds near 0 and past 2**62, sigmas where bf16 rounding matters (1e-4 below most ULPs of W0 ~ 0.02)
MEMBERS = [(0, 1e-3), (1, 1e-4), (2**62 + 5, 2e-3), (None, 0.0), (12345, 1e-2)]


@pytest.mark.parametrize("noise", NOISES)
def test_effective_weights_bit_equal_to_the_reference_switch(noise):
    """A whole tensor with odd sizes (partial tiles in n and k): every member's weight as the kernel makes it."""
    name = "model.layers.3.mlp.down_proj.weight"
    base = _randn((37, 45), 1, scale=0.02)
    layout = L.replicated(name, tuple(base.shape))
    _, _, _, w = _run(base, layout, MEMBERS, noise)
    assert _same(w, effective_weights_reference(base, layout, MEMBERS, noise))
    assert _same(w[3], base)                     # the base member is W0 itself
    assert not _same(w[0], base) and not _same(w[0], w[4])


@pytest.mark.parametrize("noise", NOISES)
def test_fused_qkv_uses_each_logical_tensors_indices(noise):
    """A TP=2 rank-1 fused qkv shard (kv heads replicated): rows from three logical tensors at their own offsets,
    each with its own keys, the same bits as the switch on that layout."""
    hidden, heads, kv_heads, head_dim = 32, 4, 2, 8
    q = ("model.layers.0.self_attn.q_proj.weight", (heads * head_dim, hidden))
    k = ("model.layers.0.self_attn.k_proj.weight", (kv_heads * head_dim, hidden))
    v = ("model.layers.0.self_attn.v_proj.weight", (kv_heads * head_dim, hidden))
    layout = L.qkv_parallel(q, k, v, heads, kv_heads, tp=2, rank=1)
    base = _randn(layout.shape, 2, scale=0.02)
    members = [(3, 1e-3), (4, 5e-4)]
    _, _, _, w = _run(base, layout, members, noise, rows=2)
    assert _same(w, effective_weights_reference(base, layout, members, noise))
    whole = L.replicated(q[0], layout.shape)      # the same shard taken as one tensor would be other noise
    assert not _same(w, effective_weights_reference(base, whole, members, noise))


@pytest.mark.parametrize("noise", NOISES)
def test_row_parallel_and_vocab_padding(noise):
    """A row-parallel shard (a column window of the logical tensor) and a vocab-parallel shard whose last rows are
    padding (they stay base)."""
    rp = L.row_parallel("model.layers.1.self_attn.o_proj.weight", (24, 48), tp=2, rank=1)
    base = _randn(rp.shape, 3, scale=0.02)
    _, _, _, w = _run(base, rp, [(9, 1e-3)], noise)
    assert _same(w, effective_weights_reference(base, rp, [(9, 1e-3)], noise))
    vp = L.vocab_parallel("model.embed_tokens.weight", (100, 16), tp=2, rank=1)  # padded to 128: rows 36..63 pad
    base = _randn(vp.shape, 4, scale=0.02)
    _, _, _, w = _run(base, vp, [(9, 1e-3)], noise)
    assert _same(w, effective_weights_reference(base, vp, [(9, 1e-3)], noise))
    assert _same(w[0, 36:], base[36:]) and not _same(w[0, :36], base[:36])


@pytest.mark.parametrize("noise", NOISES)
def test_products_match_the_materialised_matmul(noise):
    """Y within bf16 tolerance of fp32 products of the reference weights, with a bias, rows spanning r-tiles."""
    name = "model.layers.0.mlp.gate_proj.weight"
    base = _randn((40, 33), 5, scale=0.05)
    layout = L.replicated(name, tuple(base.shape))
    members = MEMBERS[:4]
    x, b, y, _ = _run(base, layout, members, noise, rows=19, bias=True)   # 19 rows: two r-tiles of 16
    ref = member_linear_reference(x, base, layout, members, noise, bias=b)
    torch.testing.assert_close(y.float(), ref.float(), rtol=1.6e-2, atol=1e-2)
    # a product that ignored the noise would be off by far more than the tolerance at sigma 1e-2
    plain = member_linear_reference(x, base, layout, [(None, 0.0)] * 4, noise, bias=b)
    assert (y[3].float() - plain[3].float()).abs().max() <= 1e-2
    assert (ref[0].float() - plain[0].float()).abs().max() > 0


def test_fp16_and_one_row():
    """fp16 weights (nearest-even conversion) and a single decode row per member."""
    name = "lm_head.weight"
    base = _randn((20, 17), 6, scale=0.02, dtype=torch.float16)
    layout = L.replicated(name, tuple(base.shape))
    members = [(1, 1e-3), (2, 1e-3)]
    x, _, y, w = _run(base, layout, members, "rademacher", rows=1, dtype=torch.float16)
    assert _same(w, effective_weights_reference(base, layout, members))
    torch.testing.assert_close(y.float(), member_linear_reference(x, base, layout, members).float(),
                               rtol=2e-3, atol=2e-3)


def test_refuses_blocks_over_part_of_a_row():
    """The kernel's row tables hold one logical tensor per local row; a narrower block would be hashed wrong."""
    shape = (8, 16)
    partial = L.LocalLayout(shape, (L.Block("a", shape, 0, 0, 8, 0, 0, 8), L.Block("b", shape, 0, 0, 8, 8, 8, 8)))
    with pytest.raises(ValueError, match="whole local rows"):
        ML.MemberLinear(torch.zeros(shape, dtype=torch.bfloat16), partial)


@pytest.mark.parametrize("gather", [False, True])
@pytest.mark.parametrize("which", ["odd whole tensor", "fused qkv", "vocab padding"])
def test_packed_signs_give_the_same_weights_and_products(which, gather, monkeypatch):
    """Signs drawn once into packed words (1 bit an element) and read by the matmul in place of the hash, both ways
    of unpacking: the same effective weights to the bit (K = 45 and 80: partial words), and products as the
    materialised matmul's."""
    monkeypatch.setattr(ML.LaunchConfig, "block_k", 32)   # a tile holds whole words
    monkeypatch.setattr(ML.LaunchConfig, "unpack_gather", gather)
    if which == "odd whole tensor":
        layout = L.replicated("model.layers.3.mlp.down_proj.weight", (37, 45))
    elif which == "fused qkv":
        layout = L.qkv_parallel(("q", (32, 80)), ("k", (16, 80)), ("v", (16, 80)), 4, 2, tp=2, rank=0)
    else:
        layout = L.vocab_parallel("model.embed_tokens.weight", (100, 16), tp=2, rank=1)
    base = _randn(layout.shape, 9, scale=0.02)
    x = _randn((len(MEMBERS), 5, layout.cols), 10)
    w = torch.empty((len(MEMBERS), *layout.shape), dtype=base.dtype)
    y = ML.member_linear_triton(x, base, MEMBERS, layout=layout, weights_out=w, signs=True)
    assert _same(w, effective_weights_reference(base, layout, MEMBERS))
    torch.testing.assert_close(y.float(), member_linear_reference(x, base, layout, MEMBERS).float(),
                               rtol=1.6e-2, atol=1e-2)


def test_packed_signs_are_rademacher_only_and_need_whole_words_a_tile():
    base = torch.zeros((8, 64), dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="Rademacher"):
        ML.MemberLinear(base, name="w", noise="gaussian", signs=True)
    linear = ML.MemberLinear(base, name="w", signs=True)   # the fixture's block_k is 16
    linear.set_members([(1, 1e-3)])
    with pytest.raises(ValueError, match="multiple of 32"):
        linear(torch.zeros((1, 2, 64), dtype=torch.bfloat16))
