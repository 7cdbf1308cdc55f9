"""The noise definition (golden vectors), its statistics, the switch semantics and the bf16/fp16
drift of the in-place delta switch, all on the pure-torch reference (CPU)."""
from __future__ import annotations

import hashlib
import json
import math
import pathlib

import numpy as np
import pytest
import torch

from randopt.kernels.noise_ref import (delta_switch_reference_, hash_bits, negative_mask_index, reconstruct_reference_,
                               tensor_keys)
from randopt.engines import perturb
from tests.support.noise_rule import check_cpu_kernel_paths, check_golden_bf16_case, from_hex_bf16, hash_py

GOLDEN = json.loads((pathlib.Path(__file__).parent / "golden" / "noise_v1.json").read_text(encoding="utf-8"))
ENTRIES = GOLDEN["entries"]


def _sign_py(seed: int, name: str, i: int) -> int:
    """The definition as written in noise_ref's docstring, in plain Python integers."""
    return -1 if hash_py(b"randopt-noise-v1", seed, name, i) >> 31 else 1


def _signs(seed: int, name: str, n: int, start: int = 0) -> np.ndarray:
    negative = negative_mask_index(np.arange(start, start + n, dtype=np.uint32), *tensor_keys(seed, name))
    return np.where(negative, -1.0, 1.0)


# --------------------------------------------------------------------------------------------- golden


@pytest.mark.parametrize("e", ENTRIES, ids=lambda e: f"{e['seed']}-{e['name']}")
def test_golden_first64(e):
    want = [1 if c == "+" else -1 for c in e["first64"]]
    assert list(tensor_keys(e["seed"], e["name"])) == e["keys"]
    assert [_sign_py(e["seed"], e["name"], i) for i in range(64)] == want  # the written definition
    assert _signs(e["seed"], e["name"], 64).astype(int).tolist() == want  # numpy uint32 path
    ka, kb = tensor_keys(e["seed"], e["name"])
    torch_path = 1 - 2 * (hash_bits(torch.arange(64), ka, kb) >> 31)  # int64 torch path (GPU fallback)
    assert torch_path.tolist() == want


@pytest.mark.parametrize("e", ENTRIES[:3], ids=lambda e: f"{e['seed']}-{e['name']}")
def test_golden_checksum_first_million(e):
    negative = _signs(e["seed"], e["name"], 1 << 20) < 0
    digest = hashlib.sha256(np.packbits(negative, bitorder="little").tobytes()).hexdigest()
    assert digest == e["sha256_first_2^20_bits"]


def test_golden_through_reconstruct():
    """The weights themselves: base 0 in fp32 gives exactly sigma * R."""
    e = ENTRIES[1]
    live, base = torch.empty(8, 8), torch.zeros(8, 8)
    reconstruct_reference_(live, base, e["seed"], 0.25, e["name"])
    assert (live.flatten() / 0.25).tolist() == [1.0 if c == "+" else -1.0 for c in e["first64"]]


HIGH = GOLDEN["high_index"]
BF16 = GOLDEN["perturbed_bf16"]


def _packed_sha256(negative: np.ndarray) -> str:
    return hashlib.sha256(np.packbits(negative, bitorder="little").tobytes()).hexdigest()


@pytest.mark.parametrize("e", HIGH["entries"], ids=lambda e: f"{e['seed']}-{e['name']}")
def test_golden_signs_above_2_31(e):
    """Indices from 2^31 - 2 to 2^32 - 1, where a signed 32-bit or a float index would go wrong."""
    want = [1 if c == "+" else -1 for c in e["signs"]]
    idx = HIGH["indices"]
    assert [_sign_py(e["seed"], e["name"], i) for i in idx] == want  # the written definition
    ka, kb = tensor_keys(e["seed"], e["name"])
    assert np.where(negative_mask_index(np.array(idx, dtype=np.uint64), ka, kb), -1, 1).tolist() == want
    assert (1 - 2 * (hash_bits(torch.tensor(idx), ka, kb) >> 31)).tolist() == want  # int64 torch path
    for key, digest in e.items():
        if key.startswith("sha256_2^16_bits_from_"):
            start = int(key.rsplit("_", 1)[1])
            assert _packed_sha256(_signs(e["seed"], e["name"], 1 << 16, start=start) < 0) == digest, key


def test_golden_high_signs_through_a_local_layout():
    """The engines' sharded path (randopt/kernels/layout.py) at indices across 2^31: a local slice of a 1-D
    logical tensor of 2^32 - 1 elements (never allocated), base 0 in fp32, gives the pinned signs."""
    from randopt.kernels.layout import Block, LocalLayout, reconstruct_local_reference_
    for e in HIGH["entries"]:
        key = next(k for k in e if k.startswith("sha256_2^16_bits_from_"))
        start = int(key.rsplit("_", 1)[1])
        assert start < 2**31 < start + (1 << 16)
        layout = LocalLayout((1 << 16,), (Block(e["name"], (2**32 - 1,), 0, start, 1 << 16),))
        live, base = torch.empty(1 << 16), torch.zeros(1 << 16)
        reconstruct_local_reference_(live, base, e["seed"], 0.25, layout)
        assert _packed_sha256((live < 0).numpy()) == e[key], e["name"]


@pytest.mark.parametrize("case", BF16["cases"], ids=lambda c: f"{c['seed']}-{c['sigma']}")
def test_golden_bf16_round_to_nearest_even_on_a_nonzero_base(case):
    """W = rne_bf16(fp32(W0) + fp32(sigma) * R) on a nonzero bf16 base, bit for bit, through the
    reference, the engines' CPU kernel (perturb.reconstruct_), the one-hop delta switch, and the rule
    written out in the test; and at logical indices past 2^31 through the local-layout path."""
    check_golden_bf16_case(BF16, case, _sign_py, None, min_moved=32)


def test_golden_bf16_ties_go_to_the_even_neighbour():
    """sigma = 2^-8 is half a bf16 ulp in [1, 2): there every result is a tie, pinned to the even one."""
    case = next(c for c in BF16["cases"] if c["sigma"] == 2.0**-8)
    base = from_hex_bf16(BF16["base_bf16"]).float()
    got = from_hex_bf16(case["bf16_at_0"])
    exact = base + case["sigma"] * torch.tensor([_sign_py(case["seed"], case["name"], i) for i in range(64)],
                                                dtype=torch.float32)
    in_range = (base.abs() >= 1) & (base.abs() < 2) & (exact.abs() > 1)  # base and result in [1, 2]
    assert int(in_range.sum()) >= 8
    assert torch.all((got.float() - exact)[in_range].abs() == case["sigma"])  # each one was a tie ...
    assert torch.all(got.view(torch.int16)[in_range] & 1 == 0)  # ... resolved to the even mantissa


# ----------------------------------------------------------------------------------------- statistics

N_STAT = 1 << 18


@pytest.mark.parametrize("seed,name", [(0, "a.weight"), (7, "model.layers.3.mlp.up_proj.weight"), (2**62, "x")])
def test_signs_balanced(seed, name):
    assert abs(_signs(seed, name, N_STAT).mean()) < 3 / math.sqrt(N_STAT)
    # also far from index 0 (high index bits)
    assert abs(_signs(seed, name, N_STAT, start=3_000_000_000).mean()) < 3 / math.sqrt(N_STAT)


@pytest.mark.parametrize("pair", [
    ((5, "model.layers.0.self_attn.q_proj.weight"), (5, "model.layers.0.self_attn.o_proj.weight")),
    ((5, "model.layers.0.mlp.gate_proj.weight"), (5, "model.layers.1.mlp.gate_proj.weight")),
    ((5, "lm_head.weight"), (6, "lm_head.weight")),
])
def test_uncorrelated(pair):
    """Same-shape tensors (or seeds) share no noise: |mean(R1 * R2)| < 3 / sqrt(n)."""
    (s1, n1), (s2, n2) = pair
    assert abs((_signs(s1, n1, N_STAT) * _signs(s2, n2, N_STAT)).mean()) < 3 / math.sqrt(N_STAT)
    # neighbouring indices of one tensor are uncorrelated too
    r = _signs(s1, n1, N_STAT + 1)
    assert abs((r[1:] * r[:-1]).mean()) < 3 / math.sqrt(N_STAT)


# ------------------------------------------------------------------------------------------ semantics


def _model(dtype):
    g = torch.Generator().manual_seed(0)
    shapes = {"emb.weight": (37, 16), "l0.q.weight": (16, 16), "l0.k.weight": (16, 16), "l0.q.bias": (16,),
              "norm.weight": (16,)}
    return {k: torch.randn(s, generator=g).to(dtype) for k, s in shapes.items()}


def _same(a: dict, b: dict) -> bool:
    return all(torch.equal(a[k].view(-1).view(torch.uint8), b[k].view(-1).view(torch.uint8)) for k in a)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_seed_order_and_restore(dtype):
    base = _model(dtype)
    live = {k: v.clone() for k, v in base.items()}
    ptrs = {k: v.data_ptr() for k, v in live.items()}
    perturb.reconstruct_(live, base, 11, 1e-2)
    direct = {k: v.clone() for k, v in live.items()}
    for seed in [3, 99, 11, 5, 2**40, 11]:  # any path that ends on seed 11
        perturb.reconstruct_(live, base, seed, 1e-2 if seed != 5 else 0.3)
    perturb.reconstruct_(live, base, 11, 1e-2)
    assert _same(live, direct)
    assert all(live[k].data_ptr() == ptrs[k] for k in live)  # same storage: views stay valid
    assert not _same(live, base)
    perturb.restore_(live, base)
    assert _same(live, base)


def test_same_shape_tensors_differ():
    base = _model(torch.float32)
    live = {k: v.clone() for k, v in base.items()}
    perturb.reconstruct_(live, base, 1, 0.5)
    dq, dk = live["l0.q.weight"] - base["l0.q.weight"], live["l0.k.weight"] - base["l0.k.weight"]
    assert not torch.equal(torch.sign(dq), torch.sign(dk))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_delta_one_hop_from_base_is_exact(dtype):
    """base -> seed by the delta switch equals the absolute reconstruct (one rounding, same inputs)."""
    base = _model(dtype)
    live = {k: v.clone() for k, v in base.items()}
    perturb.delta_switch_(live, None, 0.0, 8, 1e-2)
    absolute = {k: torch.empty_like(v) for k, v in base.items()}
    perturb.reconstruct_(absolute, base, 8, 1e-2)
    assert _same(live, absolute)


def test_rejects_bad_arguments():
    base = _model(torch.float32)
    live = {k: v.clone() for k, v in base.items()}
    with pytest.raises(ValueError):
        perturb.reconstruct_(live, base, 1, 0.0)
    with pytest.raises(ValueError):
        perturb.reconstruct_(live, base, -1, 1e-2)


# ---------------------------------------------------------------------------------------------- drift

# Delta = mean |W_delta - W_abs| / sigma over elements of W0 ~ N(0, 1) (so |w| ~ 1), after a random
# walk of in-place seed switches, against the absolute reconstruct of the walk's last seed.
DRIFT_CASES = [(torch.bfloat16, 1e-3, 0.77), (torch.bfloat16, 1e-2, 0.20), (torch.float16, 1e-3, 0.046)]
DRIFT_HOPS = (16, 64, 256, 1024, 2048)
DRIFT_N = 1 << 14


def _drift(dtype, sigma, rng):
    name = "drift.weight"
    base = torch.randn(DRIFT_N, generator=torch.Generator().manual_seed(1)).to(dtype)
    seed = int(rng.integers(0, 2**62))
    w = base.clone()
    delta_switch_reference_(w, name, None, 0.0, seed, sigma)
    absolute = torch.empty_like(base)
    out = {}
    for hop in range(1, max(DRIFT_HOPS) + 1):
        nxt = int(rng.integers(0, 2**62))
        delta_switch_reference_(w, name, seed, sigma, nxt, sigma)
        seed = nxt
        if hop in DRIFT_HOPS:
            reconstruct_reference_(absolute, base, seed, sigma, name)
            out[hop] = (w.float() - absolute.float()).abs().mean().item() / sigma
    return out


def test_delta_drift_is_flat():
    rng = np.random.default_rng(2024)
    rows = [(dtype, sigma, want, _drift(dtype, sigma, rng)) for dtype, sigma, want in DRIFT_CASES]
    print("\nin-place delta switch drift: mean |W_delta - W_abs| / sigma, W0 ~ N(0,1), n = 2**14")
    print(f"{'dtype':9s} {'sigma':>6s} {'expect':>6s} " + " ".join(f"{h:>6d}" for h in DRIFT_HOPS))
    for dtype, sigma, want, got in rows:
        print(f"{str(dtype)[6:]:9s} {sigma:6.0e} {want:6.3f} " + " ".join(f"{got[h]:6.3f}" for h in DRIFT_HOPS))
    for dtype, sigma, want, got in rows:
        values = np.array([got[h] for h in DRIFT_HOPS])
        assert np.all(np.abs(values / want - 1) < 0.15), (dtype, sigma, got)
        assert values.max() / values.min() < 1.2, ("drift grows with hops", dtype, sigma, got)


def test_tensor_keys_many_matches_tensor_keys():
    from randopt.kernels.noise_ref import tensor_keys_many
    names = [e["name"] for e in ENTRIES] + ["", "x" * 300]
    for seed in (0, 1, 2**63 - 1):
        many = tensor_keys_many(seed, [n.encode("utf-8") for n in names])
        assert [tuple(map(int, k)) for k in many] == [tensor_keys(seed, n) for n in names]


@pytest.mark.parametrize("use_numba", [True, False], ids=["numba", "numpy"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float16])
def test_cpu_kernel_paths_equal_the_reference(dtype, use_numba):
    """randopt/kernels/perturb_cpu.py: the compiled (numba) and the numpy block loops give the reference's bits,
    on a nonzero base with values where rounding matters (ties, tiny and huge magnitudes, +-0, inf),
    across block boundaries (BLOCK) and on a tensor smaller than one chunk."""
    check_cpu_kernel_paths(dtype, use_numba, None)
