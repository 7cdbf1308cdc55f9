"""The Gaussian noise (perturbation.noise: gaussian, "gaussian v2" in randopt/kernels/noise_ref.py): its table,
its golden vectors through every CPU path, its statistics on 10^7 draws, the CPU kernel's bits, and
the in-place delta switch's drift. The Triton interpreter and the local layouts: test_kernel_triton.py;
vLLM's layouts: test_vllm_layouts.py; a compiled GPU kernel: test_kernel_cuda.py."""
from __future__ import annotations

import hashlib
import json
import math
import pathlib
import statistics

import numpy as np
import pytest
import torch

from randopt.kernels import perturb_cpu
from randopt.kernels import noise_ref
from randopt.kernels.noise_kinds import GAUSSIAN, KINDS, RADEMACHER, definition
from randopt.kernels.noise_ref import (GAUSSIAN_TABLE, GAUSSIAN_TABLE_SHA256, delta_switch_reference_, gaussian_index,
                               gaussian_noise_torch, negative_mask_index, reconstruct_reference_, tensor_keys)
from randopt.engines import perturb
from tests.support.noise_rule import check_cpu_kernel_paths, check_golden_bf16_case, from_hex_bf16, hash_py, hex_bf16

GOLDEN = json.loads((pathlib.Path(__file__).parent / "golden" / "noise_gaussian_v2.json").read_text(encoding="utf-8"))
ENTRIES = GOLDEN["entries"]


# ------------------------------------------------------------------- the definition, written out here

def _table_py() -> np.ndarray:
    """T read from the shipped file with numpy alone (little-endian float32), not through noise_ref."""
    return np.fromfile(GAUSSIAN_TABLE, dtype="<f4")


TABLE = _table_py()


def _gauss_py(seed: int, name: str, i: int) -> np.float32:
    """The definition as written in noise_ref's docstring, in plain Python integers and the table."""
    h = hash_py(b"randopt-gauss-v2", seed, name, i)
    magnitude = TABLE[(h >> 16) & 0x7FFF]
    return np.float32(-magnitude if h >> 31 else magnitude)


def _hex(values) -> list[str]:
    return [f"{int(v):08x}" for v in np.asarray(values, dtype=np.float32).view(np.uint32)]


def _draws(seed: int, name: str, n: int, start: int = 0) -> np.ndarray:
    return gaussian_index(np.arange(start, start + n, dtype=np.uint64), *tensor_keys(seed, name, GAUSSIAN))


def _fast_draws(seed: int, name: str, n: int) -> np.ndarray:
    """n draws through the engines' CPU kernel: an fp32 base of zeros at sigma 1 gives rn32(1 * G) = G."""
    live = torch.empty(n)
    perturb_cpu.reconstruct_many_cpu_([(name, live, torch.zeros(n))], 1.0, seed, noise=GAUSSIAN)
    return live.numpy()


def _sha(values: np.ndarray) -> str:
    return hashlib.sha256(np.asarray(values, dtype="<f4").tobytes()).hexdigest()


# ------------------------------------------------------------------------------------------ the table

def test_the_table_is_the_pinned_file_and_the_written_quantiles():
    """The file's sha256 is the pin (so the code key covers it), and it is what the definition says:
    T[k] = fp32 nearest to Phi^-1(1/2 + (2k + 1) / 2**17), rebuilt here in fp64."""
    data = GAUSSIAN_TABLE.read_bytes()
    assert hashlib.sha256(data).hexdigest() == GAUSSIAN_TABLE_SHA256 == GOLDEN["table_sha256"]
    assert len(TABLE) == 2**15 and np.all(np.diff(TABLE) > 0) and TABLE[0] > 0
    normal = statistics.NormalDist()
    rebuilt = np.array([normal.inv_cdf(0.5 + (2 * k + 1) / 2.0**17) for k in range(2**15)]).astype(np.float32)
    assert np.array_equal(rebuilt, TABLE)
    assert np.array_equal(noise_ref.gaussian_table(), TABLE)
    # over all 2**16 values (+-T): mean exactly 0, variance 0.99998 (the midpoints' tails are cut at 4.32)
    assert abs(np.mean(TABLE.astype(np.float64) ** 2) - 1) < 3e-5


def test_a_table_that_does_not_match_its_pin_is_refused(tmp_path, monkeypatch):
    bad = tmp_path / "table.f32"
    data = bytearray(GAUSSIAN_TABLE.read_bytes())
    data[4] ^= 1
    bad.write_bytes(bytes(data))
    monkeypatch.setattr(noise_ref, "GAUSSIAN_TABLE", bad)
    noise_ref.gaussian_table_bits.cache_clear()
    try:
        with pytest.raises(ValueError, match="restore the file from git"):
            noise_ref.gaussian_table_bits()
        monkeypatch.setattr(noise_ref, "GAUSSIAN_TABLE", tmp_path / "absent.f32")
        with pytest.raises(FileNotFoundError, match="missing"):
            noise_ref.gaussian_table_bits()
    finally:
        monkeypatch.undo()
        noise_ref.gaussian_table_bits.cache_clear()
    assert noise_ref.gaussian_table_bits().size == 2**15


def test_the_kinds_name_their_definitions():
    assert KINDS == (RADEMACHER, GAUSSIAN)  # config/schema.yaml lists the same (tests/test_config.py)
    assert definition(RADEMACHER) == "kernels/noise_ref.py v1"  # what every record has said
    assert definition(GAUSSIAN) == "kernels/noise_ref.py gaussian v2"
    with pytest.raises(ValueError, match="perturbation.noise"):
        definition("uniform")
    with pytest.raises(ValueError, match="perturbation.noise"):
        perturb.Perturber({"w": torch.zeros(2)}, {"w": torch.zeros(2)}, noise="normal")


# ---------------------------------------------------------------------------------------------- golden

@pytest.mark.parametrize("e", ENTRIES, ids=lambda e: f"{e['seed']}-{e['name']}")
def test_golden_first64(e):
    assert list(tensor_keys(e["seed"], e["name"], GAUSSIAN)) == e["keys"]
    assert tensor_keys(e["seed"], e["name"], GAUSSIAN) != tensor_keys(e["seed"], e["name"])  # own domain
    want = e["first64_f32"]
    assert _hex([_gauss_py(e["seed"], e["name"], i) for i in range(64)]) == want  # the written definition
    assert _hex(_draws(e["seed"], e["name"], 64)) == want  # numpy uint32 path
    torch_path = gaussian_noise_torch(torch.arange(64), *tensor_keys(e["seed"], e["name"], GAUSSIAN))
    assert _hex(torch_path.numpy()) == want  # int64 torch path (GPU without Triton)
    for use_numba in (True, False):  # the engines' CPU kernel: base 0 in fp32, sigma 1
        live = torch.empty(64)
        perturb_cpu.reconstruct_many_cpu_([(e["name"], live, torch.zeros(64))], 1.0, e["seed"],
                                          use_numba=use_numba, noise=GAUSSIAN)
        assert _hex(live.numpy()) == want, use_numba
    live = torch.empty(64)
    reconstruct_reference_(live, torch.zeros(64), e["seed"], 1.0, e["name"], GAUSSIAN)
    assert _hex(live.numpy()) == want  # the reference reconstruct


@pytest.mark.parametrize("e", ENTRIES[:3], ids=lambda e: f"{e['seed']}-{e['name']}")
def test_golden_checksum_first_million(e):
    assert _sha(_draws(e["seed"], e["name"], 1 << 20)) == e["sha256_first_2^20"]
    assert _sha(_fast_draws(e["seed"], e["name"], 1 << 20)) == e["sha256_first_2^20"]


@pytest.mark.parametrize("e", ENTRIES, ids=lambda e: f"{e['seed']}-{e['name']}")
def test_golden_values_above_2_31(e):
    """Indices from 2^31 - 2 to 2^32 - 1, where a signed 32-bit or a float index would go wrong, and
    2^16-element windows across 2^31 and ending at 2^32 - 1."""
    idx = GOLDEN["high_indices"]
    want = e["high_f32"]
    assert _hex([_gauss_py(e["seed"], e["name"], i) for i in idx]) == want
    keys = tensor_keys(e["seed"], e["name"], GAUSSIAN)
    assert _hex(gaussian_index(np.array(idx, dtype=np.uint64), *keys)) == want
    assert _hex(gaussian_noise_torch(torch.tensor(idx), *keys).numpy()) == want
    for key, digest in e.items():
        if key.startswith("sha256_2^16_from_"):
            start = int(key.rsplit("_", 1)[1])
            assert _sha(_draws(e["seed"], e["name"], 1 << 16, start=start)) == digest, key


def test_golden_high_values_through_a_local_layout():
    """The engines' sharded path (randopt/kernels/layout.py) at indices across 2^31: a local slice of a 1-D
    logical tensor of 2^32 - 1 elements (never allocated; the largest a tensor may be, so the window
    ending at index 2^32 - 1 is the hash's alone), base 0 in fp32, sigma 1."""
    from randopt.kernels.layout import Block, LocalLayout, reconstruct_local_reference_
    for e in ENTRIES:
        for key in (k for k in e if k.startswith("sha256_2^16_from_")):
            start = int(key.rsplit("_", 1)[1])
            if start + (1 << 16) > 2**32 - 1:
                continue
            assert start < 2**31 < start + (1 << 16)
            layout = LocalLayout((1 << 16,), (Block(e["name"], (2**32 - 1,), 0, start, 1 << 16),))
            live = torch.empty(1 << 16)
            reconstruct_local_reference_(live, torch.zeros(1 << 16), e["seed"], 1.0, layout, GAUSSIAN)
            assert _sha(live.numpy()) == e[key], (e["name"], start)


BF16 = GOLDEN["perturbed_bf16"]


@pytest.mark.parametrize("case", BF16["cases"], ids=lambda c: f"{c['seed']}-{c['sigma']}")
def test_golden_bf16_on_a_nonzero_base(case):
    """W = rne_bf16(fp32(W0) + rn32(fp32(sigma) * G)) on a nonzero bf16 base, bit for bit, through the
    reference, the CPU kernel (perturb.reconstruct_, both loops), the one-hop delta switch and the
    rule written out here; and at logical indices past 2^31 through the local-layout path."""
    base = check_golden_bf16_case(BF16, case, _gauss_py, GAUSSIAN, min_moved=16)
    numpy_loop = torch.empty_like(base)  # the CPU kernel without numba, too
    perturb_cpu.reconstruct_many_cpu_([(case["name"], numpy_loop, base)], case["sigma"], case["seed"],
                                      use_numba=False, noise=GAUSSIAN)
    assert hex_bf16(numpy_loop) == case["bf16_at_0"]


# ------------------------------------------------------------------------------------------ statistics

N_STAT = 10**7
SEED, NAME = 12345, "model.layers.3.mlp.up_proj.weight"


def _ks_against_normal(x: np.ndarray) -> tuple[float, float]:
    """Kolmogorov-Smirnov D of the draws against N(0, 1), exactly: G takes only the 2**16 values +-T,
    so the empirical CDF is a step function on them, and D is the largest gap on either side of a
    step (Phi from math.erf). Also checks that every draw is one of those values. Returns (D, p)."""
    from scipy.special import kolmogorov
    support = np.concatenate([-TABLE[::-1], TABLE]).astype(np.float64)
    magnitude_bits = x.view(np.uint32) & np.uint32(0x7FFFFFFF)
    k = np.searchsorted(TABLE.view(np.uint32), magnitude_bits)
    assert np.array_equal(TABLE.view(np.uint32)[k], magnitude_bits), "a draw that is not a table value"
    position = np.where(x < 0, 2**15 - 1 - k, 2**15 + k)
    counts = np.bincount(position, minlength=2**16)
    above = np.cumsum(counts) / x.size
    below = above - counts / x.size
    phi = np.array([0.5 * (1 + math.erf(v / math.sqrt(2))) for v in support])
    d = float(max(np.abs(above - phi).max(), np.abs(below - phi).max()))
    return d, float(kolmogorov(d * math.sqrt(x.size)))


def test_ten_million_draws_are_standard_normal():
    """Mean within 4 standard errors of 0, variance within 1e-3 of 1, KS against N(0,1) does not
    reject at 1 %; at low indices and past 2**31."""
    for start, x in ((0, _fast_draws(SEED, NAME, N_STAT)), (3_000_000_000, _draws(SEED, NAME, N_STAT, 3_000_000_000))):
        x64 = x.astype(np.float64)
        mean, var = x64.mean(), x64.var()
        d, p = _ks_against_normal(x)
        print(f"\nGaussian, {N_STAT} draws from index {start}: mean {mean:+.2e} ({mean / math.sqrt(var / N_STAT):+.2f} SE), "
              f"variance {var:.5f}, KS D {d:.2e} (p = {p:.3f}; 1 % critical {1.6276 / math.sqrt(N_STAT):.2e})")
        assert abs(mean) < 4 * math.sqrt(var / N_STAT)
        assert abs(var - 1) < 1e-3
        assert p > 0.01


def test_two_seeds_two_tensors_and_the_rademacher_signs_are_uncorrelated():
    x = _fast_draws(SEED, NAME, N_STAT)
    others = {"another seed": _fast_draws(SEED + 1, NAME, N_STAT),
              "another tensor": _fast_draws(SEED, "model.layers.3.mlp.down_proj.weight", N_STAT),
              "the same seed's Rademacher signs": np.where(
                  negative_mask_index(np.arange(N_STAT, dtype=np.uint32), *tensor_keys(SEED, NAME)), -1.0, 1.0),
              "the neighbouring index": np.roll(x, 1)}
    for what, y in others.items():
        rho = np.corrcoef(x, y)[0, 1]
        print(f"rho with {what}: {rho:+.2e}")
        assert abs(rho) < 1e-3, what


# --------------------------------------------------------------------------------------- the CPU kernel

@pytest.mark.parametrize("use_numba", [True, False], ids=["numba", "numpy"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float16])
def test_cpu_kernel_paths_equal_the_reference(dtype, use_numba):
    """randopt/kernels/perturb_cpu.py under Gaussian noise: both block loops give the reference's bits on a
    base where rounding matters (ties, tiny and huge magnitudes, +-0, inf), across a block boundary
    (BLOCK) and on a tensor smaller than one chunk."""
    check_cpu_kernel_paths(dtype, use_numba, GAUSSIAN)


def test_a_fused_multiply_add_would_change_the_bits():
    """Why the definition rounds sigma*G before the add: computed with one rounding (as an FMA would),
    1.8 % of fp32 weights and about one bf16 weight in 10^6 come out differently, so the identity
    tests (which include fp32) catch any path that contracts the two."""
    n = 1 << 20
    for dtype, at_least in ((torch.float32, 0.01), (torch.bfloat16, 0.0)):
        w0 = torch.randn(n, generator=torch.Generator().manual_seed(3)).to(dtype)
        ref = torch.empty_like(w0)
        reconstruct_reference_(ref, w0, 9, 1e-2, "f", GAUSSIAN)
        g = _draws(9, "f", n).astype(np.float64)
        fused = torch.from_numpy(w0.double().numpy() + float(np.float32(1e-2)) * g).to(torch.float32).to(dtype)
        share = (fused != ref).double().mean().item()
        print(f"{dtype}: a fused multiply-add changes {share:.2e} of the weights")
        assert share > at_least


# ----------------------------------------------------------------------------------- switch semantics

def _model(dtype):
    g = torch.Generator().manual_seed(0)
    shapes = {"emb.weight": (37, 16), "l0.q.weight": (16, 16), "l0.k.weight": (16, 16), "l0.q.bias": (16,)}
    return {k: torch.randn(s, generator=g).to(dtype) for k, s in shapes.items()}


def _same(a: dict, b: dict) -> bool:
    return all(torch.equal(a[k].view(-1).view(torch.uint8), b[k].view(-1).view(torch.uint8)) for k in a)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_seed_order_restore_and_one_delta_hop(dtype):
    """Path-independent reconstruct, exact restore, one delta hop from base = the reconstruct, and
    the Gaussian member is not the Rademacher one."""
    base = _model(dtype)
    live = {k: v.clone() for k, v in base.items()}
    perturb.reconstruct_(live, base, 11, 1e-2, GAUSSIAN)
    direct = {k: v.clone() for k, v in live.items()}
    for seed in [3, 99, 2**40, 11]:
        perturb.reconstruct_(live, base, seed, 1e-2, GAUSSIAN)
    assert _same(live, direct)
    rademacher = {k: torch.empty_like(v) for k, v in base.items()}
    perturb.reconstruct_(rademacher, base, 11, 1e-2)
    assert not _same(live, rademacher)
    hop = {k: v.clone() for k, v in base.items()}
    perturb.delta_switch_(hop, None, 0.0, 11, 1e-2, noise=GAUSSIAN)
    assert _same(hop, direct)
    p = perturb.Perturber(live, base, noise=GAUSSIAN)
    p.to_member_(11, 1e-2)
    assert _same(live, direct)
    p.to_base_()
    assert _same(live, base)


# Delta drift under Gaussian noise: mean |W_delta - W_abs| / sigma for W0 ~ N(0, 1), as in
# test_kernel_noise.py. Unlike Rademacher's (flat: the +-sigma steps keep every weight on a few values
# near base, so rounding errors do not pile up), each Gaussian hop adds a fresh rounding error, and the
# drift grows like sqrt(hops): measured values (randopt/kernels/README.md's table) within 15 %.
GAUSS_DRIFT = {(torch.bfloat16, 1e-3): (1.544, 3.376, 7.303, 14.886, 21.290),
               (torch.bfloat16, 1e-2): (0.414, 0.835, 1.663, 3.303, 4.701)}
DRIFT_HOPS = (16, 64, 256, 1024, 2048)


def _drift(dtype, sigma, rng, n=1 << 14):
    name = "drift.weight"
    base = torch.randn(n, generator=torch.Generator().manual_seed(1)).to(dtype)
    seed = int(rng.integers(0, 2**62))
    w = base.clone()
    delta_switch_reference_(w, name, None, 0.0, seed, sigma, GAUSSIAN)
    absolute = torch.empty_like(base)
    out = []
    for hop in range(1, max(DRIFT_HOPS) + 1):
        nxt = int(rng.integers(0, 2**62))
        delta_switch_reference_(w, name, seed, sigma, nxt, sigma, GAUSSIAN)
        seed = nxt
        if hop in DRIFT_HOPS:
            reconstruct_reference_(absolute, base, seed, sigma, name, GAUSSIAN)
            out.append((w.float() - absolute.float()).abs().mean().item() / sigma)
    return out


def test_gaussian_delta_drift_grows_like_the_square_root_of_the_hops():
    rng = np.random.default_rng(2024)
    print("\nin-place delta switch drift, Gaussian: mean |W_delta - W_abs| / sigma, W0 ~ N(0,1), n = 2**14")
    for (dtype, sigma), want in GAUSS_DRIFT.items():
        got = _drift(dtype, sigma, rng)
        print(f"{str(dtype)[6:]:9s} {sigma:6.0e} " + " ".join(f"{v:7.3f}" for v in got))
        assert np.all(np.abs(np.array(got) / np.array(want) - 1) < 0.15), (dtype, sigma, got)
        growth = np.array(got) / got[0]
        assert np.all(np.abs(growth / np.sqrt(np.array(DRIFT_HOPS) / DRIFT_HOPS[0]) - 1) < 0.35), growth
