"""Writes tests/golden/noise_v1.json from the reference. Run ONCE, when the definition was made.

The file pins the noise definition forever (a seed must mean the same weights next year): if a
later change makes tests/test_kernel_noise.py fail against it, the change is wrong, not the file.
Usage (repo root): PYTHONPATH=. python tests/golden/make_noise_v1.py

Sections were only ever added: "entries" (signs at indices 0..63, a checksum of the first 2^20, the
Gaussian option) was written first; "high_index" (signs at logical indices from 2^31 to 2^32 - 1) and
"perturbed_bf16" (the bf16 bits of round-to-nearest-even(fp32(W0) + fp32(sigma) * R) on a nonzero
base, at low and at high indices) were added later (issue 18), and the script rewrites the older
sections byte for byte (tests/test_kernel_noise.py checks the file against this script's output).
"""
from __future__ import annotations

import hashlib
import json
import pathlib

import numpy as np
import torch

from randopt.kernels.noise_ref import NOISE_VERSION, negative_mask_index, reconstruct_reference_, tensor_keys

PAIRS = [
    (0, "model.embed_tokens.weight"),
    (1, "model.layers.0.self_attn.q_proj.weight"),
    (1, "model.layers.0.self_attn.k_proj.weight"),
    (123456789, "lm_head.weight"),
    (2**63 - 1, "model.layers.27.mlp.down_proj.weight"),
    (42, "ünïcødé.weight"),
]
N_CHECKSUM = 1 << 20
# Indices on both sides of 2^31 (where a signed 32-bit index would turn negative) up to 2^32 - 1.
HIGH_INDICES = [2**31 - 2, 2**31 - 1, 2**31, 2**31 + 1, 3_000_000_000, 4_000_000_007, 2**32 - 2, 2**32 - 1]
N_HIGH_CHECKSUM = 1 << 16
HIGH_STARTS = [2**31 - N_HIGH_CHECKSUM // 2, 2**32 - N_HIGH_CHECKSUM]  # windows across 2^31, up to 2^32 - 1
# A logical tensor of 1,048,000 x 4096 = 4.29e9 elements (never allocated): its row 1,000,000 starts at
# index 4,096,000,000 > 2^31. The bf16 pins below are also taken there, through a one-row local layout.
HUGE = ("huge.weight", (1_048_000, 4096))
HUGE_ROW = 1_000_000
# (seed, name, sigma): sigma 2^-8 is half a bf16 ulp in [1, 2), so every element there is a tie;
# 1e-3 and 0.05 are not representable (sigma is rounded to fp32 first).
BF16_CASES = [
    (1, "model.layers.0.self_attn.q_proj.weight", 2.0**-8),
    (123456789, "lm_head.weight", 1e-3),
    (2**63 - 1, "model.layers.27.mlp.down_proj.weight", 0.05),
]


def base_bf16_values() -> list[float]:
    """64 nonzero-base values, each exactly a bf16: delicate ones (ties in [1, 2), values far above
    and far below sigma, +-0, large, tiny) and a spread of magnitudes and signs."""
    special = [1.0, 1.0078125, 1.015625, 1.9921875, -1.0, -1.5, 0.0, -0.0, 256.0, -3.0e4, 1e-30, 2.0**-9,
               -2.0**-9, 0.0078125, 0.33203125, -0.0498046875]
    spread = [(-1) ** i * (1 + (i * 37 % 128) / 128) * 2.0 ** ((i * 5) % 11 - 8) for i in range(48)]
    return [float(torch.tensor(v, dtype=torch.bfloat16).float()) for v in special + spread]


def bf16_hex(t: torch.Tensor) -> list[str]:
    return [f"{int(v) & 0xFFFF:04x}" for v in t.view(torch.int16).tolist()]


def perturbed_bf16(seed: int, name: str, sigma: float, base: torch.Tensor) -> dict:
    """The reference's bits at logical indices 0..63 of `name`, and at row HUGE_ROW of HUGE."""
    from randopt.kernels.layout import Block, LocalLayout, reconstruct_local_reference_
    low = torch.empty_like(base)
    reconstruct_reference_(low, base, seed, sigma, name)
    row = base.view(1, -1)
    high = torch.empty_like(row)
    reconstruct_local_reference_(high, row, seed, sigma,
                                 LocalLayout(row.shape, (Block(*HUGE, 0, HUGE_ROW, 1, 0, 0, row.shape[1]),)))
    return {"seed": seed, "name": name, "sigma": sigma, "bf16_at_0": bf16_hex(low),
            f"bf16_at_{HUGE[0]}_row_{HUGE_ROW}": bf16_hex(high.view(-1))}


def high_index_entry(seed: int, name: str) -> dict:
    negative = negative_mask_index(np.array(HIGH_INDICES, dtype=np.uint32), *tensor_keys(seed, name))
    sums = {}
    for start in HIGH_STARTS:
        window = negative_mask_index(np.arange(start, start + N_HIGH_CHECKSUM, dtype=np.uint32),
                                     *tensor_keys(seed, name))
        sums[f"sha256_2^16_bits_from_{start}"] = hashlib.sha256(np.packbits(window, bitorder="little").tobytes()).hexdigest()
    return {"seed": seed, "name": name, "signs": "".join("-" if n else "+" for n in negative), **sums}


def signs(seed: int, name: str, n: int) -> np.ndarray:
    """R in {-1, +1} (int8) for logical indices 0..n-1."""
    negative = negative_mask_index(np.arange(n, dtype=np.uint32), *tensor_keys(seed, name))
    return np.where(negative, -1, 1).astype(np.int8)


def sign_checksum(seed: int, name: str, n: int) -> str:
    """sha256 of the first n signs as bits: bit k of byte j is 1 iff R(8j + k) == -1."""
    negative = signs(seed, name, n) < 0
    return hashlib.sha256(np.packbits(negative, bitorder="little").tobytes()).hexdigest()


def main() -> None:
    entries = []
    for seed, name in PAIRS:
        entries.append({
            "seed": seed,
            "name": name,
            "keys": list(tensor_keys(seed, name)),
            "first64": "".join("+" if s > 0 else "-" for s in signs(seed, name, 64)),
            "sha256_first_2^20_bits": sign_checksum(seed, name, N_CHECKSUM),
        })
    doc = {
        "noise_version": NOISE_VERSION,
        "bits": "bit k of byte j is 1 iff R(seed, name, 8j + k) == -1 (numpy packbits, bitorder little)",
        "entries": entries,
        "high_index": {"indices": HIGH_INDICES, "entries": [high_index_entry(seed, name) for seed, name in PAIRS]},
    }
    base = base_bf16_values()
    base_t = torch.tensor(base, dtype=torch.bfloat16)
    doc["perturbed_bf16"] = {
        "rule": "bf16 bits (hex) of round_to_nearest_even(float32(W0) + float32(sigma) * R(seed, name, i))",
        "huge_tensor": {"name": HUGE[0], "shape": list(HUGE[1]), "row": HUGE_ROW},
        "base_bf16": bf16_hex(base_t),
        "cases": [perturbed_bf16(seed, name, sigma, base_t) for seed, name, sigma in BF16_CASES],
    }
    out = pathlib.Path(__file__).with_name("noise_v1.json")
    out.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
