"""What the noise tests (tests/test_kernel_noise.py: Rademacher; tests/test_kernel_gaussian.py: Gaussian)
share: the written definition's hash in plain Python integers, bf16 bits as hex, round-to-nearest-even
written from the rule, the golden bf16 check that runs one pinned case through every CPU path, and
the CPU kernel's loops against the reference.
None of it goes through randopt/kernels/ except the paths under test, so the tests stay independent readings
of randopt/kernels/noise_ref.py's docstring."""
from __future__ import annotations

import hashlib
from collections.abc import Callable

import numpy as np
import torch

_M32 = 0xFFFFFFFF


def fmix32_py(h: int) -> int:
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _M32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _M32
    return h ^ (h >> 16)


def hash_py(domain: bytes, seed: int, name: str, i: int) -> int:
    """The 32-bit hash of element i of tensor `name` under `seed`, in the noise kind's own domain
    (b"randopt-noise-v1", b"randopt-gauss-v2"), as the definition writes it."""
    digest = hashlib.sha256(domain + b"\0" + seed.to_bytes(8, "little") + name.encode()).digest()
    ka, kb = int.from_bytes(digest[0:4], "little"), int.from_bytes(digest[4:8], "little")
    return fmix32_py(fmix32_py(i ^ ka) ^ kb)


def from_hex_bf16(values: list[str]) -> torch.Tensor:
    return torch.tensor([int(v, 16) for v in values], dtype=torch.int32).to(torch.int16).view(torch.bfloat16)


def hex_bf16(t: torch.Tensor) -> list[str]:
    return [f"{int(v) & 0xFFFF:04x}" for v in t.contiguous().view(torch.int16).tolist()]


def rne_bf16_py(x: np.float32) -> int:
    """Round one fp32 to bf16 bits, nearest even, written from the rule (not from the kernels)."""
    bits = int(np.array(x, dtype=np.float32).view(np.uint32))
    upper, rest = bits >> 16, bits & 0xFFFF
    return (upper + (rest > 0x8000 or (rest == 0x8000 and upper & 1))) & 0xFFFF


def check_golden_bf16_case(bf16: dict, case: dict, noise_py: Callable[[int, str, int], float],
                           noise: str | None, min_moved: int) -> torch.Tensor:
    """W = rne_bf16(fp32(W0) + rn32(fp32(sigma) * N)) on the golden file's nonzero bf16 base, bit for
    bit, through the reference, the engines' CPU kernel (perturb.reconstruct_), the one-hop delta switch
    and the rule written out with noise_py; and at logical indices past 2^31 through the local-layout
    path. noise None: each path called without the argument (its default, Rademacher). At least
    min_moved of the 64 weights must have moved. Returns the base."""
    from randopt.kernels.layout import Block, LocalLayout, reconstruct_local_reference_
    from randopt.kernels.noise_ref import reconstruct_reference_
    from randopt.engines import perturb
    args, kwargs = ((), {}) if noise is None else ((noise,), {"noise": noise})
    base = from_hex_bf16(bf16["base_bf16"])
    seed, name, sigma, want = case["seed"], case["name"], case["sigma"], case["bf16_at_0"]
    live = torch.empty_like(base)
    reconstruct_reference_(live, base, seed, sigma, name, *args)
    assert hex_bf16(live) == want
    cpu = {name: torch.empty_like(base)}
    perturb.reconstruct_(cpu, {name: base}, seed, sigma, *args)
    assert hex_bf16(cpu[name]) == want
    hop = {name: base.clone()}
    perturb.delta_switch_(hop, None, 0.0, seed, sigma, **kwargs)
    assert hex_bf16(hop[name]) == want
    sig32 = np.float32(sigma)
    by_rule = [rne_bf16_py(np.float32(w0) + np.float32(sig32 * np.float32(noise_py(seed, name, i))))
               for i, w0 in enumerate(base.float().tolist())]
    assert [f"{b:04x}" for b in by_rule] == want
    assert sum(a != b for a, b in zip(want, bf16["base_bf16"])) >= min_moved  # the noise moved weights

    huge = bf16["huge_tensor"]
    row = base.view(1, -1)
    high = torch.empty_like(row)
    layout = LocalLayout(row.shape, (Block(huge["name"], tuple(huge["shape"]), 0, huge["row"], 1, 0, 0, row.shape[1]),))
    assert huge["row"] * huge["shape"][1] > 2**31
    reconstruct_local_reference_(high, row, seed, sigma, layout, *args)
    assert hex_bf16(high.view(-1)) == case[f"bf16_at_{huge['name']}_row_{huge['row']}"]
    return base


def check_cpu_kernel_paths(dtype: torch.dtype, use_numba: bool, noise: str | None) -> None:
    """randopt/kernels/perturb_cpu.py's block loop (numba's or numpy's) gives the reference's bits on a nonzero
    base with values where rounding matters (ties, tiny and huge magnitudes, +-0, inf), across a block
    boundary (BLOCK) and on a tensor smaller than one chunk. noise None: called without the argument."""
    import pytest

    from randopt.kernels import perturb_cpu
    from randopt.kernels.noise_ref import reconstruct_reference_
    if use_numba and perturb_cpu._NUMBA is None:
        pytest.fail("numba is in envs/requirements-cpu.txt but does not import")
    args, kwargs = ((), {}) if noise is None else ((noise,), {"noise": noise})
    g = torch.Generator().manual_seed(1)
    n = perturb_cpu.BLOCK + 12_345
    base = (torch.randn(n, generator=g) * torch.logspace(-6, 4, n)).to(dtype)
    special = torch.tensor([0.0, -0.0, 1.0, -1.0, 1e-8, 65504.0, float("inf"), float("-inf")], dtype=torch.float32)
    base[:special.numel()] = special.to(dtype)
    items, expected = [], {}
    for name, tensor in (("big.weight", base), ("small.bias", base[:1000].clone())):
        live = torch.empty_like(tensor)
        items.append((name, live, tensor))
        expected[name] = torch.empty_like(tensor)
        reconstruct_reference_(expected[name], tensor, 12, 0.003, name, *args)
    perturb_cpu.reconstruct_many_cpu_(items, 0.003, 12, threads=2, use_numba=use_numba, **kwargs)
    as_int = torch.int16 if dtype != torch.float32 else torch.int32
    for name, live, _ in items:
        assert torch.equal(live.view(as_int), expected[name].view(as_int)), name
