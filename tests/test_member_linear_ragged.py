"""The member linear's ragged form (docs/member_batched_engine.md, step 1): X [rows, K] sorted by member with
segment offsets [M + 1], each member its own number of rows (none included), as a grouped GEMM whose expert is the
member; and the embedding gather perturbed only at the rows read. Under the Triton interpreter, against the
reference (randopt/kernels/member_linear_ref.py): effective weights to the bit, products within bf16 tolerance, for
the hashed and the packed-sign paths and both noise kinds. Tiny shapes: the interpreter runs numpy."""
from __future__ import annotations

import importlib.util

import pytest

torch = pytest.importorskip("torch")
if importlib.util.find_spec("triton") is None:
    pytest.skip("triton is not installed", allow_module_level=True)

from tests.support.member_linear_interpreted import ML  # noqa: E402

from randopt.kernels import layout as L  # noqa: E402
from randopt.kernels.member_linear_ref import (MemberLinearReference, effective_weights_reference,  # noqa: E402
                                               member_embedding_reference, member_linear_reference, segment_offsets)
from randopt.kernels.noise_ref import reconstruct_reference_  # noqa: E402

# seeds near 0 and past 2**62, sigmas 1e-4 .. 1e-2, a base member; at sigma 1e-2 a member's product differs from
# another's by more than the tolerance, so rows multiplied by the wrong member's weight fail the checks
MEMBERS = [(11, 1e-2), (None, 0.0), (2**62 + 3, 1e-2), (5, 1e-4), (12345, 2e-3)]
# ragged: an empty first and an empty middle member, one decode row, a prefill segment over two r-tiles of 16
COUNTS = [0, 3, 0, 19, 1]
PATHS = [("rademacher", False), ("gaussian", False), ("rademacher", True)]


@pytest.fixture(autouse=True)
def _interpret(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(ML.LaunchConfig, "block_n", 16)   # several n-tiles on tiny shapes
    monkeypatch.setattr(ML.LaunchConfig, "block_k", 32)   # whole sign words a tile; K = 45: a partial tile
    monkeypatch.setattr(ML.LaunchConfig, "max_block_r", 16)


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.equal(a.contiguous().view(torch.int16), b.contiguous().view(torch.int16))


def _randn(shape, seed, scale=1.0, dtype=torch.bfloat16) -> torch.Tensor:
    return (scale * torch.randn(shape, generator=torch.Generator().manual_seed(seed))).to(dtype)


def _layout(which: str) -> L.LocalLayout:
    if which == "fused qkv":
        return L.qkv_parallel(("model.layers.0.self_attn.q_proj.weight", (32, 45)),
                              ("model.layers.0.self_attn.k_proj.weight", (16, 45)),
                              ("model.layers.0.self_attn.v_proj.weight", (16, 45)), 4, 2, tp=1, rank=0)
    return L.replicated("model.layers.1.mlp.down_proj.weight", (37, 45))


@pytest.mark.parametrize("noise,signs", PATHS)
@pytest.mark.parametrize("which", ["whole tensor", "fused qkv"])
def test_ragged_segments_bit_exact_weights_and_products(which, noise, signs):
    layout = _layout(which)
    base = _randn(layout.shape, 1, scale=0.05)
    offsets = segment_offsets(COUNTS)
    x = _randn((sum(COUNTS), layout.cols), 2)
    bias = _randn((len(MEMBERS), layout.rows), 3, scale=0.1)
    w = torch.empty((len(MEMBERS), *layout.shape), dtype=base.dtype)
    y = ML.member_linear_triton(x, base, MEMBERS, layout=layout, noise=noise, bias=bias, weights_out=w, signs=signs,
                                offsets=offsets)
    ref_w = effective_weights_reference(base, layout, MEMBERS, noise)
    assert _same(w, ref_w)     # every member's weight, the empty segments' included (r-tile 0 writes it)
    ref = member_linear_reference(x, base, layout, MEMBERS, noise, bias=bias, offsets=offsets)
    assert y.shape == (sum(COUNTS), layout.rows)
    torch.testing.assert_close(y.float(), ref.float(), rtol=1.6e-2, atol=1e-2)
    # the same rows owned by the members one place on (member 3's rows on member 4's weights, ...) are far off:
    # the check above can see a row multiplied by another member's weight
    shifted = member_linear_reference(x, base, layout, MEMBERS[1:] + MEMBERS[:1], noise, bias=bias[[1, 2, 3, 4, 0]],
                                      offsets=offsets)
    assert not torch.allclose(y.float(), shifted.float(), rtol=1.6e-2, atol=1e-2)


def test_the_reference_segments_are_per_member_matmuls():
    """The ragged reference itself: segment m's rows times member m's materialised weight, rounded once."""
    layout = _layout("whole tensor")
    base = _randn(layout.shape, 4, scale=0.05)
    offsets = segment_offsets(COUNTS)
    x = _randn((sum(COUNTS), layout.cols), 5)
    y = member_linear_reference(x, base, layout, MEMBERS, offsets=offsets)
    w = effective_weights_reference(base, layout, MEMBERS)
    r0 = 0
    for m, count in enumerate(COUNTS):
        want = (x[r0:r0 + count].float() @ w[m].float().T).to(x.dtype)
        assert _same(y[r0:r0 + count], want)
        r0 += count


@pytest.mark.parametrize("signs", [False, True])
def test_equal_rows_form_is_the_ragged_launch(signs):
    """X [M, rows, K] is the segments' special case: the same launch, so the same bits as explicit offsets."""
    layout = _layout("whole tensor")
    base = _randn(layout.shape, 6, scale=0.05)
    x = _randn((len(MEMBERS), 5, layout.cols), 7)
    linear = ML.MemberLinear(base, layout, signs=signs)
    linear.set_members(MEMBERS)
    equal = linear(x)
    ragged = linear(x.reshape(-1, layout.cols), offsets=segment_offsets([5] * len(MEMBERS)))
    assert equal.shape == (len(MEMBERS), 5, layout.rows) and _same(equal.reshape(ragged.shape), ragged)


def test_fp32_rows_over_bf16_weights():
    """A model computing in fp32 over a bf16 checkpoint: the effective weight is still bf16's (widened exactly),
    and the products are fp32 ones (tight tolerance: only the summation order differs)."""
    layout = _layout("whole tensor")
    base = _randn(layout.shape, 8, scale=0.05)
    offsets = segment_offsets(COUNTS)
    x = _randn((sum(COUNTS), layout.cols), 9, dtype=torch.float32)
    y = ML.member_linear_triton(x, base, MEMBERS, layout=layout, noise="gaussian", offsets=offsets)
    ref = member_linear_reference(x, base, layout, MEMBERS, "gaussian", offsets=offsets)
    assert y.dtype == torch.float32
    torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("linear_cls", ["triton", "reference"])
def test_bad_segments_are_refused(linear_cls):
    layout = _layout("whole tensor")
    base = _randn(layout.shape, 10, scale=0.05)
    linear = (ML.MemberLinear if linear_cls == "triton" else MemberLinearReference)(base, layout)
    linear.set_members(MEMBERS[:2])
    x = _randn((4, layout.cols), 11)
    with pytest.raises(ValueError, match="offsets"):
        linear(x, offsets=torch.tensor([0, 3, 2], dtype=torch.int32))   # falling
    with pytest.raises(ValueError, match="offsets"):
        linear(x, offsets=torch.tensor([0, 1, 3], dtype=torch.int32))   # short of the rows
    with pytest.raises(ValueError, match="max_rows"):
        linear(x, offsets=torch.tensor([0, 1, 4], dtype=torch.int32), max_rows=2)
    assert linear(x, offsets=torch.tensor([0, 1, 4], dtype=torch.int32), max_rows=3).shape == (4, layout.rows)


@pytest.mark.parametrize("noise", ["rademacher", "gaussian"])
def test_embedding_gather_perturbs_only_the_rows_read(noise):
    """Rows of the members' embeddings: the kernel's bits equal the reference gather's, which equal those rows of
    each member's whole switched tensor (the definition); a base member reads W0."""
    name = "model.embed_tokens.weight"
    base = _randn((50, 24), 12, scale=0.02)
    ids = torch.tensor([[3, 49, 0, 3], [7, 7, 8, 1], [20, 3, 11, 2]])
    row_member = torch.tensor([[0, 0, 0, 0], [1, 1, 1, 1], [4, 4, 4, 4]])
    ref = member_embedding_reference(ids, row_member, base, name, MEMBERS, noise)
    emb = ML.MemberEmbedding(base, name, noise)
    emb.set_members(MEMBERS)
    assert _same(emb(ids, row_member), ref)
    assert torch.equal(emb(ids, row_member, torch.float32), ref.float())
    whole = torch.empty_like(base)
    for r in range(ids.shape[0]):
        seed, sigma = MEMBERS[int(row_member[r, 0])]
        if seed is None:
            assert _same(ref[r], base[ids[r]])
            continue
        reconstruct_reference_(whole, base, seed, sigma, name, noise)
        assert _same(ref[r], whole[ids[r]]) and not _same(ref[r], base[ids[r]])
