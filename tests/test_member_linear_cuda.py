"""The compiled member-batched linear (randopt/kernels/member_linear_triton.py) on a CUDA GPU: each member's
effective weight bit-equal to the CPU reference switch's under both noise kinds, at shapes with many tiles and
fused layouts; the Gaussian launch compiled without fp32 FMA (the interpreter never fuses, so only a GPU can show
it); products within bf16 tolerance of a bmm over the materialised weights. Skipped, saying why, without a GPU;
bench/roofline/fused_linear_bench.py checks the same at the real 1.5B's projection shapes."""
from __future__ import annotations

import pytest

from tests.support.compiled_triton import require_compiled_triton

pytestmark = pytest.mark.cuda
require_compiled_triton()
import torch  # noqa: E402

from randopt.kernels import layout as L  # noqa: E402
from randopt.kernels import member_linear_triton as ML  # noqa: E402
from randopt.kernels.member_linear_ref import effective_weights_reference  # noqa: E402

NOISES = ["rademacher", "gaussian"]
MEMBERS = [(0, 1e-3), (7, 5e-4), (2**62 + 1, 2e-3), (None, 0.0), (99, 1e-2)]


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.equal(a.cpu().contiguous().view(torch.int16), b.cpu().contiguous().view(torch.int16))


def _qkv_layout():
    """Qwen2.5-1.5B's fused qkv at TP 1 (hidden 1536, 12 heads, 2 kv heads of 128)."""
    hidden, heads, kv, hd = 1536, 12, 2, 128
    return L.qkv_parallel(("model.layers.5.self_attn.q_proj.weight", (heads * hd, hidden)),
                          ("model.layers.5.self_attn.k_proj.weight", (kv * hd, hidden)),
                          ("model.layers.5.self_attn.v_proj.weight", (kv * hd, hidden)), heads, kv, tp=1, rank=0)


@pytest.mark.parametrize("noise", NOISES)
@pytest.mark.parametrize("which", ["qkv", "down_tp2", "vocab_pad"])
def test_compiled_effective_weights_equal_the_reference(noise, which):
    if which == "qkv":
        layout = _qkv_layout()
    elif which == "down_tp2":
        layout = L.row_parallel("model.layers.5.mlp.down_proj.weight", (1536, 8960), tp=2, rank=1)
    else:
        layout = L.vocab_parallel("model.embed_tokens.weight", (1000, 256), tp=2, rank=1)
    gen = torch.Generator().manual_seed(3)
    base = (0.02 * torch.randn(layout.shape, generator=gen)).to(torch.bfloat16)
    x = torch.randn((len(MEMBERS), 8, layout.cols), generator=gen).to(torch.bfloat16)
    linear = ML.MemberLinear(base.cuda(), layout, noise=noise)
    linear.set_members(MEMBERS)
    w = torch.empty((len(MEMBERS), *layout.shape), dtype=torch.bfloat16, device="cuda")
    y = linear(x.cuda(), weights_out=w)
    ref = effective_weights_reference(base, layout, MEMBERS, noise)
    assert _same(w, ref)
    if noise == "gaussian":
        ptx = linear.last_launch.asm["ptx"]
        assert "fma.rn.f32" not in ptx and "fma.f32" not in ptx
    want = torch.bmm(x.cuda().float(), ref.cuda().float().transpose(1, 2))
    torch.testing.assert_close(y.float(), want, rtol=1.6e-2, atol=2e-2)


@pytest.mark.parametrize("gather", [False, True])
@pytest.mark.parametrize("which", ["qkv", "down_tp2"])
def test_compiled_packed_signs_equal_the_reference(which, gather, monkeypatch):
    """Signs drawn once into packed words and read by the compiled matmul, both unpackings: the switch's weights
    to the bit."""
    monkeypatch.setattr(ML.LaunchConfig, "unpack_gather", gather)
    layout = _qkv_layout() if which == "qkv" else L.row_parallel("model.layers.5.mlp.down_proj.weight", (1536, 8960),
                                                                   tp=2, rank=1)
    gen = torch.Generator().manual_seed(4)
    base = (0.02 * torch.randn(layout.shape, generator=gen)).to(torch.bfloat16)
    x = torch.randn((len(MEMBERS), 8, layout.cols), generator=gen).to(torch.bfloat16)
    linear = ML.MemberLinear(base.cuda(), layout, signs=True)
    linear.set_members(MEMBERS)
    w = torch.empty((len(MEMBERS), *layout.shape), dtype=torch.bfloat16, device="cuda")
    y = linear(x.cuda(), weights_out=w)
    ref = effective_weights_reference(base, layout, MEMBERS)
    assert _same(w, ref)
    want = torch.bmm(x.cuda().float(), ref.cuda().float().transpose(1, 2))
    torch.testing.assert_close(y.float(), want, rtol=1.6e-2, atol=2e-2)
