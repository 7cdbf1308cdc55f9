"""Layouts (tensor parallelism, fused qkv / gate_up, vocab padding) and the Triton kernels under the
Triton interpreter, all against the pure-torch reference, bit for bit, under both noise kinds
(Rademacher, and Gaussian with its golden vectors).

TRITON_INTERPRET is read when a function is decorated with triton.jit: triton's own jit'd helpers
at its first import, our kernels when randopt/kernels/perturb_triton.py is executed. So it is set here
before anything imports triton, this module loads its own copy of perturb_triton.py (under a
private name, whatever was imported before), and the variable is restored at once; the autouse
fixture sets it again only while this module's tests run. The kernels use Triton builtins only (no
jit'd helpers such as tl.zeros), so they still interpret if another module imported triton first.
"""
from __future__ import annotations

import importlib.util
import os
import pathlib
import sys

_PREVIOUS = os.environ.get("TRITON_INTERPRET")
os.environ["TRITON_INTERPRET"] = "1"


def _load_interpreted():
    """randopt/kernels/perturb_triton.py, executed fresh with the interpreter on; None without triton."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return None
    path = pathlib.Path(__file__).resolve().parents[1] / "randopt" / "kernels" / "perturb_triton.py"
    spec = importlib.util.spec_from_file_location("randopt.kernels._perturb_triton_interpreted", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


try:
    _TK = _load_interpreted()
finally:
    if _PREVIOUS is None:
        del os.environ["TRITON_INTERPRET"]
    else:
        os.environ["TRITON_INTERPRET"] = _PREVIOUS

import pytest  # noqa: E402
import torch  # noqa: E402

from randopt.kernels import layout as L  # noqa: E402
from randopt.kernels.noise_ref import delta_switch_reference_, rademacher, reconstruct_reference_  # noqa: E402
from randopt.engines import perturb  # noqa: E402

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
NOISES = ["rademacher", "gaussian"]


@pytest.fixture(autouse=True)
def _interpret(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")


@pytest.fixture(scope="module")
def tk():
    if _TK is None:
        pytest.skip("triton is not installed")
    assert _TK.INTERPRETED
    return _TK


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(-1).view(torch.uint8)


def _equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.equal(_bits(a), _bits(b))


def _base(shape, dtype, seed=0):
    """N(0,1) weights plus the values where rounding is delicate (0, -0, large, tiny, +-inf)."""
    t = torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype).view(-1)
    special = torch.tensor([0.0, -0.0, 1.0, -1.0, 3e4, -3e4, 1e-30, float("inf"), float("-inf")]).to(dtype)
    k = min(t.numel(), special.numel())
    t[:k] = special[:k]
    return t.view(shape)


# ------------------------------------------------------------------------------ whole tensors, interpreter


@pytest.mark.parametrize("noise", NOISES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1,), (7,), (4097,), (3, 3001)])
def test_reconstruct_bit_exact(tk, dtype, shape, noise):
    base = _base(shape, dtype)
    for seed, sigma in [(1, 1e-3), (2**63 - 1, 0.5), (12345, 3e-2)]:
        got, want = torch.empty_like(base), torch.empty_like(base)
        tk.reconstruct_triton_(got, base, seed, sigma, "model.w", noise)
        reconstruct_reference_(want, base, seed, sigma, "model.w", noise)
        assert _equal(got, want), (dtype, shape, seed, sigma)


@pytest.mark.parametrize("noise", NOISES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_delta_switch_bit_exact(tk, dtype, noise):
    base = _base((5, 1001), dtype)
    # base -> a, a -> b (both sides), b -> b with another sigma, b -> base (one side)
    path = [(None, 0.0, 3, 1e-2), (3, 1e-2, 4, 1e-2), (4, 1e-2, 4, 2e-3), (4, 2e-3, None, 0.0)]
    got, want = base.clone(), base.clone()
    for step in path:
        tk.delta_switch_triton_(got, "m.w", *step, noise=noise)
        delta_switch_reference_(want, "m.w", *step, noise=noise)
        assert _equal(got, want), (dtype, step)


def _gauss_golden():
    import json
    return json.loads((pathlib.Path(__file__).parent / "golden" / "noise_gaussian_v2.json").read_text(encoding="utf-8"))


def _f32_hex(t: torch.Tensor) -> list[str]:
    return [f"{int(v) & 0xFFFFFFFF:08x}" for v in t.contiguous().view(torch.int32).tolist()]


def test_gaussian_golden_through_the_interpreted_kernels(tk):
    """The Gaussian golden vectors through Triton: G itself (fp32 base 0, sigma 1) at indices 0..63
    (flat kernel) and in a 2^16 window across 2^31 of a logical tensor of 2^32 - 1 elements (flat
    kernel at a logical offset); the bf16 cases on a nonzero base, at index 0 and at a row past 2^31 of
    a 1,048,000 x 4096 tensor (tile kernel: a column window), and through a SwitchPlan."""
    import hashlib
    golden = _gauss_golden()
    for e in golden["entries"]:
        got = torch.empty(64)
        tk.reconstruct_triton_(got, torch.zeros(64), e["seed"], 1.0, e["name"], "gaussian")
        assert _f32_hex(got) == e["first64_f32"], e["name"]
    e = golden["entries"][1]
    start = next(int(k.rsplit("_", 1)[1]) for k in e if k.startswith("sha256_2^16_from_"))
    assert start < 2**31 < start + (1 << 16)
    window = L.LocalLayout((1 << 16,), (L.Block(e["name"], (2**32 - 1,), 0, start, 1 << 16),))
    got = torch.empty(1 << 16)
    tk.reconstruct_local_triton_(got, torch.zeros(1 << 16), e["seed"], 1.0, window, "gaussian")
    assert hashlib.sha256(got.numpy().astype("<f4").tobytes()).hexdigest() == e[f"sha256_2^16_from_{start}"]
    bf16 = golden["perturbed_bf16"]
    base = torch.tensor([int(v, 16) for v in bf16["base_bf16"]], dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    huge = bf16["huge_tensor"]
    for case in bf16["cases"]:
        low = torch.empty_like(base)
        tk.reconstruct_triton_(low, base, case["seed"], case["sigma"], case["name"], "gaussian")
        assert [f"{int(v) & 0xFFFF:04x}" for v in low.view(torch.int16).tolist()] == case["bf16_at_0"]
        row = base.view(1, -1)
        lay = L.LocalLayout(row.shape, (L.Block(huge["name"], tuple(huge["shape"]), 0, huge["row"], 1, 0, 0, 64),))
        assert not lay.blocks[0].full_rows  # the tile kernel
        high = torch.empty_like(row)
        tk.reconstruct_local_triton_(high, row, case["seed"], case["sigma"], lay, "gaussian")
        assert [f"{int(v) & 0xFFFF:04x}" for v in high.view(torch.int16).view(-1).tolist()] == \
            case[f"bf16_at_{huge['name']}_row_{huge['row']}"]
        live = {case["name"]: torch.empty_like(base)}
        tk.SwitchPlan(live, {case["name"]: base}, use_graphs=False, noise="gaussian").reconstruct_(case["seed"], case["sigma"])
        assert [f"{int(v) & 0xFFFF:04x}" for v in live[case["name"]].view(torch.int16).tolist()] == case["bf16_at_0"]


def _ties():
    """bf16 values in [1, 2) and sigma = half a bf16 ulp there: every perturbed value is a tie."""
    base = torch.tensor([1.0078125, 1.015625, 1.0234375, 1.03125] * 4, dtype=torch.bfloat16)
    base[8:] = -base[8:]
    return base, 2.0**-8


def test_bf16_reference_rounds_to_nearest_even_on_ties():
    """The reference alone (no Triton needed): ties go to the even mantissa."""
    base, sigma = _ties()
    want = torch.empty_like(base)
    reconstruct_reference_(want, base, 5, sigma, "tie")
    exact = base.float() + sigma * rademacher(5, "tie", torch.arange(base.numel()))
    assert torch.all((want.float() - exact).abs() == sigma)  # every element was a tie
    assert torch.all(want.view(torch.int16) & 1 == 0)  # ... resolved to the even neighbour


def test_bf16_triton_rounds_ties_as_the_reference(tk):
    base, sigma = _ties()
    got, want = torch.empty_like(base), torch.empty_like(base)
    tk.reconstruct_triton_(got, base, 5, sigma, "tie")
    reconstruct_reference_(want, base, 5, sigma, "tie")
    assert _equal(got, want)


def test_rejects_mismatch(tk):
    with pytest.raises(ValueError):
        tk.reconstruct_triton_(torch.empty(4), torch.empty(5), 1, 1e-2, "x")
    with pytest.raises(ValueError):
        tk.reconstruct_triton_(torch.empty(4, dtype=torch.float64), torch.empty(4, dtype=torch.float64), 1, 1e-2, "x")
    with pytest.raises(ValueError):
        tk.reconstruct_triton_(torch.empty(4, 4).t(), torch.empty(4, 4).t(), 1, 1e-2, "x")


# ------------------------------------------------------------------------------------ tensor parallelism

# A small Qwen2-like model: GQA with 8 heads, 4 kv heads, biases on q/k/v; vocab 1000 padded to 1024.
H, HEADS, KV, I, V = 48, 8, 4, 80, 1000
HD = H // HEADS
P = "model.layers.0."
LOGICAL = {
    "model.embed_tokens.weight": (V, H), "lm_head.weight": (V, H), "model.norm.weight": (H,),
    P + "self_attn.q_proj.weight": (HEADS * HD, H), P + "self_attn.k_proj.weight": (KV * HD, H),
    P + "self_attn.v_proj.weight": (KV * HD, H), P + "self_attn.q_proj.bias": (HEADS * HD,),
    P + "self_attn.k_proj.bias": (KV * HD,), P + "self_attn.v_proj.bias": (KV * HD,),
    P + "self_attn.o_proj.weight": (H, H), P + "mlp.gate_proj.weight": (I, H), P + "mlp.up_proj.weight": (I, H),
    P + "mlp.down_proj.weight": (H, I),
}
PAD_ROWS = 24  # 1024 - 1000


def _logical_base(dtype):
    return {name: _base(shape, dtype, seed=j) for j, (name, shape) in enumerate(LOGICAL.items())}


def _pad(dtype):
    return torch.full((PAD_ROWS, H), 7.0, dtype=dtype)  # whatever vLLM leaves there: must stay


def _kv_shard(t: torch.Tensor, tp: int, rank: int) -> torch.Tensor:
    """vLLM's kv head shard: replicated over tp // KV ranks when tp >= KV."""
    return t.chunk(KV)[rank // (tp // KV)] if tp >= KV else t.chunk(tp)[rank]


def _shard(full: dict, tp: int, rank: int, pad: torch.Tensor) -> dict:
    """What rank `rank` of a vLLM TP=tp engine holds, written with plain torch slicing."""
    g = lambda n: full[P + n]  # noqa: E731
    out = {"model.norm.weight": full["model.norm.weight"].clone()}
    for emb in ("model.embed_tokens.weight", "lm_head.weight"):
        out[emb] = torch.cat([full[emb], pad]).chunk(tp)[rank].clone()
    for kind in ("weight", "bias"):
        out[f"qkv.{kind}"] = torch.cat([g(f"self_attn.q_proj.{kind}").chunk(tp)[rank],
                                        _kv_shard(g(f"self_attn.k_proj.{kind}"), tp, rank),
                                        _kv_shard(g(f"self_attn.v_proj.{kind}"), tp, rank)])
    out["o_proj.weight"] = g("self_attn.o_proj.weight").chunk(tp, dim=1)[rank].contiguous()
    out["gate_up.weight"] = torch.cat([g("mlp.gate_proj.weight").chunk(tp)[rank], g("mlp.up_proj.weight").chunk(tp)[rank]])
    out["down_proj.weight"] = g("mlp.down_proj.weight").chunk(tp, dim=1)[rank].contiguous()
    return out


def _layouts(tp: int, rank: int) -> dict:
    """The same shards described with kernels.layout's helpers."""
    s = lambda n: (P + n, LOGICAL[P + n])  # noqa: E731
    qkv = lambda kind: L.qkv_parallel(s(f"self_attn.q_proj.{kind}"), s(f"self_attn.k_proj.{kind}"),  # noqa: E731
                                      s(f"self_attn.v_proj.{kind}"), HEADS, KV, tp, rank)
    return {
        "model.norm.weight": L.replicated("model.norm.weight", LOGICAL["model.norm.weight"]),
        "model.embed_tokens.weight": L.vocab_parallel("model.embed_tokens.weight", (V, H), tp, rank),
        "lm_head.weight": L.vocab_parallel("lm_head.weight", (V, H), tp, rank),
        "qkv.weight": qkv("weight"), "qkv.bias": qkv("bias"),
        "o_proj.weight": L.row_parallel(*s("self_attn.o_proj.weight"), tp, rank),
        "gate_up.weight": L.merged_column_parallel([s("mlp.gate_proj.weight"), s("mlp.up_proj.weight")], tp, rank),
        "down_proj.weight": L.row_parallel(*s("mlp.down_proj.weight"), tp, rank),
    }


def _reassemble(locals_: list[dict], tp: int) -> tuple[dict, torch.Tensor]:
    """Undo _shard: the logical tensors, plus the padding rows; replicated kv heads must agree."""
    cat = lambda key, dim=0: torch.cat([loc[key] for loc in locals_], dim)  # noqa: E731
    out = {"model.norm.weight": locals_[0]["model.norm.weight"]}
    for loc in locals_[1:]:
        assert _equal(loc["model.norm.weight"], out["model.norm.weight"])
    emb = cat("model.embed_tokens.weight")
    out["model.embed_tokens.weight"], pad = emb[:V], emb[V:]
    out["lm_head.weight"] = cat("lm_head.weight")[:V]
    q_rows = HEADS * HD // tp
    kv_rows = (KV * HD // tp) if tp < KV else HD
    for kind in ("weight", "bias"):
        parts = [loc[f"qkv.{kind}"].split([q_rows, kv_rows, kv_rows]) for loc in locals_]
        out[P + f"self_attn.q_proj.{kind}"] = torch.cat([p[0] for p in parts])
        for j, proj in ((1, "k_proj"), (2, "v_proj")):
            if tp >= KV:  # one kv head per rank, each held by tp // KV consecutive ranks
                rep = tp // KV
                for r in range(tp):
                    assert _equal(parts[r][j], parts[r - r % rep][j]), "replicated kv head differs"
                out[P + f"self_attn.{proj}.{kind}"] = torch.cat([parts[r][j] for r in range(0, tp, rep)])
            else:
                out[P + f"self_attn.{proj}.{kind}"] = torch.cat([p[j] for p in parts])
    out[P + "self_attn.o_proj.weight"] = cat("o_proj.weight", 1)
    gu = [loc["gate_up.weight"].chunk(2) for loc in locals_]
    out[P + "mlp.gate_proj.weight"] = torch.cat([p[0] for p in gu])
    out[P + "mlp.up_proj.weight"] = torch.cat([p[1] for p in gu])
    out[P + "mlp.down_proj.weight"] = cat("down_proj.weight", 1)
    return out, pad


@pytest.mark.parametrize("dtype", DTYPES)
def test_sharding_harness_roundtrip(dtype):
    """The test's own shard / reassemble pair is exact on unperturbed weights, and the layouts agree
    with its shapes."""
    full = _logical_base(dtype)
    for tp in (1, 2, 4, 8):
        shards = [_shard(full, tp, r, _pad(dtype)) for r in range(tp)]
        for r, loc in enumerate(shards):
            for key, lay in _layouts(tp, r).items():
                assert lay.shape == tuple(loc[key].shape), (tp, r, key)
        back, pad = _reassemble(shards, tp)
        assert all(_equal(back[k], full[k]) for k in full) and _equal(pad, _pad(dtype))


def _perturbed_shards(impl, dtype, tp, seed, sigma, noise="rademacher"):
    full = _logical_base(dtype)
    shards = []
    for r in range(tp):
        base = _shard(full, tp, r, _pad(dtype))
        live = {k: torch.empty_like(v) for k, v in base.items()}
        for key, lay in _layouts(tp, r).items():
            impl(live[key], base[key], seed, sigma, lay, noise)
        shards.append(live)
    return full, shards


@pytest.mark.parametrize("noise", NOISES)
@pytest.mark.parametrize("impl_name", ["reference", "triton"])
@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_tp_shards_reassemble_to_unsharded(request, impl_name, tp, noise):
    """A seed means the same weights at every TP degree and fusion; padding rows stay base. The
    reference runs without Triton; only the Triton variant needs it."""
    dtype, seed, sigma = torch.bfloat16, 77, 1e-2
    impl = (L.reconstruct_local_reference_ if impl_name == "reference"
            else request.getfixturevalue("tk").reconstruct_local_triton_)
    full, shards = _perturbed_shards(impl, dtype, tp, seed, sigma, noise)
    back, pad = _reassemble(shards, tp)
    for name, base in full.items():
        want = torch.empty_like(base)
        reconstruct_reference_(want, base, seed, sigma, name, noise)
        assert _equal(back[name], want), (tp, name)
    assert _equal(pad, _pad(dtype))


@pytest.mark.parametrize("noise", NOISES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_local_kernels_bit_exact_tp4(tk, dtype, noise):
    """Every dtype, TP=4 (kv heads not replicated) and TP=8 (replicated): reconstruct and delta."""
    full = _logical_base(dtype)
    for tp in (4, 8):
        r = tp - 1  # the last rank holds the vocab padding
        base = _shard(full, tp, r, _pad(dtype))
        for key, lay in _layouts(tp, r).items():
            got, want = torch.empty_like(base[key]), torch.empty_like(base[key])
            tk.reconstruct_local_triton_(got, base[key], 9, 3e-3, lay, noise)
            L.reconstruct_local_reference_(want, base[key], 9, 3e-3, lay, noise)
            assert _equal(got, want), (dtype, tp, key)
            tk.delta_switch_local_triton_(got, lay, 9, 3e-3, 10, 3e-3, noise)
            L.delta_switch_local_reference_(want, lay, 9, 3e-3, 10, 3e-3, noise)
            assert _equal(got, want), (dtype, tp, key, "delta")


def test_tile_kernel_many_programs_and_large_indices(tk):
    """Column windows wider than one tile, odd sizes, and logical indices past 2**31 (a shard of a
    logical tensor of 4.29e9 elements, never allocated): int64 offsets, uint32 indices."""
    big = ("huge.weight", (1_048_000, 4096))
    cases = [
        L.row_parallel("w", (5, 2 * 1100), 2, 1),  # 1100 columns: two column programs
        L.LocalLayout((3, 2100), (L.Block(*big, 0, 1_000_000, 3, 0, 1000, 2100),)),  # tile, index > 2**31
        L.LocalLayout((4, 4096), (L.Block(*big, 0, 1_047_996, 4),)),  # flat, last rows: index ~ 2**32
    ]
    for lay in cases:
        base = _base(lay.shape, torch.bfloat16, seed=3)
        got, want = torch.empty_like(base), torch.empty_like(base)
        tk.reconstruct_local_triton_(got, base, 2**62 + 1, 1e-2, lay)
        L.reconstruct_local_reference_(want, base, 2**62 + 1, 1e-2, lay)
        assert _equal(got, want), lay.blocks


def test_layout_gaps_and_validation():
    lay = L.vocab_parallel("e", (1000, 8), 8, 7)  # rows 896..1023: 104 real, 24 padding
    assert lay.shape == (128, 8) and lay.gaps() == [(104, 128, 0, 8)]
    assert L.vocab_parallel("e", (1000, 8), 8, 0).gaps() == []
    two = L.LocalLayout((4, 10), (L.Block("a", (4, 6), 0, 0, 4, 0, 0, 6), L.Block("b", (2, 3), 1, 0, 2, 7, 0, 3)))
    assert two.gaps() == [(0, 1, 6, 10), (1, 3, 6, 7), (3, 4, 6, 10)]
    with pytest.raises(ValueError, match="overlap"):
        L.LocalLayout((4, 4), (L.Block("a", (4, 4), 0, 0, 3), L.Block("b", (4, 4), 2, 0, 2)))
    with pytest.raises(ValueError, match="outside"):
        L.LocalLayout((4, 4), (L.Block("a", (2, 4), 0, 0, 3),))
    with pytest.raises(ValueError):
        L.column_parallel("a", (10, 4), 4, 0)  # 10 rows do not split over 4
    with pytest.raises(ValueError):
        L.LocalLayout((2, 2), (L.Block("a", (70_000, 70_000), 0, 0, 1),))  # index past 2**32


def test_perturb_api_local_and_delta():
    """randopt.engines.perturb's local entry points (CPU: the reference) agree with the whole-tensor ones."""
    dtype, tp, r = torch.float16, 2, 1
    full = _logical_base(dtype)
    base = _shard(full, tp, r, _pad(dtype))
    layouts = _layouts(tp, r)
    live = {k: torch.empty_like(v) for k, v in base.items()}
    perturb.reconstruct_local_(live, base, 5, 1e-2, layouts)
    want = {k: torch.empty_like(v) for k, v in full.items()}
    perturb.reconstruct_(want, full, 5, 1e-2)
    assert _equal(live["gate_up.weight"], _shard(want, tp, r, _pad(dtype))["gate_up.weight"])
    walk = {k: v.clone() for k, v in base.items()}
    perturb.delta_switch_(walk, None, 0.0, 5, 1e-2, layouts)  # one hop from base is exact
    assert all(_equal(walk[k], live[k]) for k in live)
    perturb.restore_(live, base)
    assert all(_equal(live[k], base[k]) for k in live)


# ---------------------------------------------------------------------------------- plans (key tables)


@pytest.mark.parametrize("noise", NOISES)
def test_plan_local_tensors_match_reference(tk, noise):
    """SwitchPlan's kernels read the keys from a table (what its CUDA graph replays); without
    graphs (here) it launches them eagerly: same bits as the references, any sequence of switches."""
    dtype = torch.bfloat16
    full = _logical_base(dtype)
    for tp, r in ((4, 3), (8, 5)):
        base = _shard(full, tp, r, _pad(dtype))
        layouts = _layouts(tp, r)
        live = {k: torch.empty_like(v) for k, v in base.items()}
        plan = tk.SwitchPlan(live, base, layouts, use_graphs=False, noise=noise)
        for seed, sigma in ((3, 1e-2), (2**63 - 1, 2e-3)):
            plan.reconstruct_(seed, sigma)
            for k, lay in layouts.items():
                want = torch.empty_like(base[k])
                L.reconstruct_local_reference_(want, base[k], seed, sigma, lay, noise)
                assert _equal(live[k], want), (tp, k, seed)
        walk = {k: v.clone() for k, v in live.items()}
        plan.delta_switch_(2**63 - 1, 2e-3, 4, 1e-2)
        plan.delta_switch_(4, 1e-2, None, 0.0)
        for k, lay in layouts.items():
            L.delta_switch_local_reference_(walk[k], lay, 2**63 - 1, 2e-3, 4, 1e-2, noise)
            L.delta_switch_local_reference_(walk[k], lay, 4, 1e-2, None, 0.0, noise)
            assert _equal(live[k], walk[k]), (tp, k, "delta")


@pytest.mark.parametrize("noise", NOISES)
def test_plan_whole_tensors_mixed_dtypes(tk, noise):
    base = {f"t{j}.{str(dt)[6:]}": _base(shape, dt, seed=j)
            for j, (shape, dt) in enumerate([((7,), torch.bfloat16), ((3, 3001), torch.float16),
                                             ((4097,), torch.float32), ((64, 33), torch.bfloat16)])}
    live = {k: torch.empty_like(v) for k, v in base.items()}
    plan = tk.SwitchPlan(live, base, use_graphs=False, noise=noise)
    plan.reconstruct_(11, 5e-3)
    for k in base:
        want = torch.empty_like(base[k])
        reconstruct_reference_(want, base[k], 11, 5e-3, k, noise)
        assert _equal(live[k], want), k
    delta_only = {k: v.clone() for k, v in base.items()}
    tk.SwitchPlan(delta_only, use_graphs=False, noise=noise).delta_switch_(None, 0.0, 11, 5e-3)  # base -> 11: exact
    assert all(_equal(delta_only[k], live[k]) for k in base)
    with pytest.raises(ValueError, match="no base"):
        tk.SwitchPlan(delta_only, use_graphs=False).reconstruct_(1, 1e-2)
    with pytest.raises(ValueError):
        plan.reconstruct_(1, 0.0)


@pytest.mark.parametrize("noise", NOISES)
def test_perturber_cpu_falls_back_to_reference(noise):
    dtype, tp, r = torch.bfloat16, 4, 2
    base = _shard(_logical_base(dtype), tp, r, _pad(dtype))
    layouts = _layouts(tp, r)
    live = {k: torch.empty_like(v) for k, v in base.items()}
    p = perturb.Perturber(live, base, layouts, noise=noise)
    p.to_member_(6, 1e-2)
    want = {k: torch.empty_like(v) for k, v in base.items()}
    perturb.reconstruct_local_(want, base, 6, 1e-2, layouts, noise)
    assert all(_equal(live[k], want[k]) for k in live)
    perturbed = {k: v.clone() for k, v in live.items()}
    p.step_(6, 1e-2, None, 0.0)  # seed 6 -> base, in place: the reference's bits (bf16 drift and all)
    perturb.delta_switch_(want, 6, 1e-2, None, 0.0, layouts, noise)
    assert all(_equal(live[k], want[k]) for k in live)  # asserted before restore_ overwrites it
    assert all(not _equal(live[k], perturbed[k]) for k in live)  # the switch moved every tensor
    p.to_base_()
    assert all(_equal(live[k], base[k]) for k in live)
