"""Writes tests/golden/noise_v1.json from the reference. Run ONCE, when the definition was made.

The file pins the noise definition forever (a seed must mean the same weights next year): if a
later change makes tests/test_kernel_noise.py fail against it, the change is wrong, not the file.
Usage (repo root): PYTHONPATH=. python tests/golden/make_noise_v1.py
"""
from __future__ import annotations

import hashlib
import json
import pathlib

import numpy as np

from kernels.noise_ref import NOISE_VERSION, negative_mask_index, tensor_keys

PAIRS = [
    (0, "model.embed_tokens.weight"),
    (1, "model.layers.0.self_attn.q_proj.weight"),
    (1, "model.layers.0.self_attn.k_proj.weight"),
    (123456789, "lm_head.weight"),
    (2**63 - 1, "model.layers.27.mlp.down_proj.weight"),
    (42, "ünïcødé.weight"),
]
N_CHECKSUM = 1 << 20


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
    }
    out = pathlib.Path(__file__).with_name("noise_v1.json")
    out.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
