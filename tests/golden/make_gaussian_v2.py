"""Writes the Gaussian noise's table (randopt/kernels/gaussian_v2_table.f32) and its golden vectors
(tests/golden/noise_gaussian_v2.json). Run ONCE, when the definition was made.

    PYTHONPATH=. python tests/golden/make_gaussian_v2.py table     # the table, then pin its sha256
    PYTHONPATH=. python tests/golden/make_gaussian_v2.py vectors   # the golden vectors, from the reference

Both files pin "gaussian v2" (randopt/kernels/noise_ref.py) forever: a seed must mean the same weights next
year. If a later change makes tests/test_kernel_gaussian.py fail against them, the change is wrong,
not the files.

The table: T[k] = the float32 nearest to Phi^-1(1/2 + (2k + 1) / 2**17), k < 2**15. Built in fp64
(statistics.NormalDist, Wichura's AS241, about 1e-16 relative) and rounded to float32; every entry is
checked against a 50-digit mpmath quantile rounded to float32 directly, so the file holds the
correctly rounded quantiles whatever libm built it (a fp64 value within 1e-16 of a float32 rounding
boundary would be caught here, not shipped).
"""
from __future__ import annotations

import hashlib
import json
import pathlib
import statistics
import sys

import numpy as np
import torch

REPO = pathlib.Path(__file__).resolve().parents[2]
SIZE = 1 << 15


def quantiles_fp64() -> np.ndarray:
    normal = statistics.NormalDist()
    # 1/2 + (2k + 1) / 2**17 is exact in fp64: the argument carries no rounding of its own.
    return np.array([normal.inv_cdf(0.5 + (2 * k + 1) / 2.0**17) for k in range(SIZE)], dtype=np.float64)


def quantiles_mpmath_f32() -> np.ndarray:
    import mpmath
    out = np.empty(SIZE, dtype=np.float32)
    for k in range(SIZE):
        with mpmath.workdps(50):
            q = mpmath.sqrt(2) * mpmath.erfinv(2 * (mpmath.mpf(1) / 2 + mpmath.mpf(2 * k + 1) / 2**17) - 1)
        with mpmath.workprec(24):  # float32's 24-bit significand, round to nearest
            out[k] = np.float32(float(+q))
    return out


def write_table() -> None:
    table = quantiles_fp64().astype(np.float32)
    exact = quantiles_mpmath_f32()
    differ = np.flatnonzero(table != exact)
    if differ.size:
        raise SystemExit(f"fp64 build and mpmath disagree at {differ[:10]}: not writing the table")
    assert np.all(np.diff(table) > 0) and table[0] > 0
    from randopt.kernels.noise_ref import GAUSSIAN_TABLE
    data = table.astype("<f4").tobytes()
    GAUSSIAN_TABLE.write_bytes(data)
    print(f"wrote {GAUSSIAN_TABLE}: {SIZE} float32, T[0] = {table[0]:.6g}, T[-1] = {table[-1]:.6g}, "
          f"variance {np.mean(table.astype(np.float64) ** 2):.7f}\nsha256 {hashlib.sha256(data).hexdigest()} "
          "(pin it as GAUSSIAN_TABLE_SHA256 in randopt/kernels/noise_ref.py)")


# The same (seed, name) pairs, high indices and bf16 base as the Rademacher golden file, so the two
# definitions are pinned at the same places.
from tests.golden.make_noise_v1 import (BF16_CASES, HIGH_INDICES, HIGH_STARTS, HUGE, HUGE_ROW, N_HIGH_CHECKSUM,  # noqa: E402
                                        PAIRS, base_bf16_values, bf16_hex)

N_CHECKSUM = 1 << 20


def f32_hex(values: np.ndarray) -> list[str]:
    return [f"{int(v):08x}" for v in np.asarray(values, dtype=np.float32).view(np.uint32)]


def draws(seed: int, name: str, index: np.ndarray) -> np.ndarray:
    from randopt.kernels.noise_kinds import GAUSSIAN
    from randopt.kernels.noise_ref import gaussian_index, tensor_keys
    return gaussian_index(index, *tensor_keys(seed, name, GAUSSIAN))


def bits_sha256(values: np.ndarray) -> str:
    """sha256 of the draws' float32 bits, little-endian, in index order."""
    return hashlib.sha256(np.asarray(values, dtype="<f4").tobytes()).hexdigest()


def perturbed_bf16(seed: int, name: str, sigma: float, base: torch.Tensor) -> dict:
    from randopt.kernels.layout import Block, LocalLayout, reconstruct_local_reference_
    from randopt.kernels.noise_kinds import GAUSSIAN
    from randopt.kernels.noise_ref import reconstruct_reference_
    low = torch.empty_like(base)
    reconstruct_reference_(low, base, seed, sigma, name, GAUSSIAN)
    row = base.view(1, -1)
    high = torch.empty_like(row)
    reconstruct_local_reference_(high, row, seed, sigma,
                                 LocalLayout(row.shape, (Block(*HUGE, 0, HUGE_ROW, 1, 0, 0, row.shape[1]),)), GAUSSIAN)
    return {"seed": seed, "name": name, "sigma": sigma, "bf16_at_0": bf16_hex(low),
            f"bf16_at_{HUGE[0]}_row_{HUGE_ROW}": bf16_hex(high.view(-1))}


def write_vectors() -> None:
    from randopt.kernels.noise_kinds import GAUSSIAN_VERSION
    from randopt.kernels.noise_ref import GAUSSIAN_TABLE_SHA256, tensor_keys
    entries = []
    for seed, name in PAIRS:
        high = {f"sha256_2^16_from_{start}": bits_sha256(draws(seed, name, np.arange(start, start + N_HIGH_CHECKSUM,
                                                                                    dtype=np.uint64)))
                for start in HIGH_STARTS}
        entries.append({
            "seed": seed, "name": name, "keys": list(tensor_keys(seed, name, "gaussian")),
            "first64_f32": f32_hex(draws(seed, name, np.arange(64, dtype=np.uint32))),
            "sha256_first_2^20": bits_sha256(draws(seed, name, np.arange(N_CHECKSUM, dtype=np.uint32))),
            "high_f32": f32_hex(draws(seed, name, np.array(HIGH_INDICES, dtype=np.uint64))),
            **high,
        })
    base = torch.tensor(base_bf16_values(), dtype=torch.bfloat16)
    doc = {
        "gaussian_version": GAUSSIAN_VERSION,
        "table_sha256": GAUSSIAN_TABLE_SHA256,
        "values": "float32 bits (hex) of G(seed, name, i); checksums: sha256 of the float32 bits, little-endian, "
                  "in index order",
        "high_indices": HIGH_INDICES,
        "entries": entries,
        "perturbed_bf16": {
            "rule": "bf16 bits (hex) of round_to_nearest_even(float32(W0) + rn32(float32(sigma) * G(seed, name, i)))",
            "huge_tensor": {"name": HUGE[0], "shape": list(HUGE[1]), "row": HUGE_ROW},
            "base_bf16": bf16_hex(base),
            "cases": [perturbed_bf16(seed, name, sigma, base) for seed, name, sigma in BF16_CASES],
        },
    }
    out = pathlib.Path(__file__).with_name(f"noise_gaussian_v{GAUSSIAN_VERSION}.json")
    out.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {out}")


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    {"table": write_table, "vectors": write_vectors}[sys.argv[1]]()
