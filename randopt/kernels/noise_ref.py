"""The noise of randopt (Rademacher, and Gaussian as an option), defined once, and its bit-exact
pure-torch reference.

Rademacher noise (the default; definition v1, golden vectors in tests pin it forever)
-------------------------------------------------------------------------------------
For a seed ``s`` (an integer in [0, 2**63)), a logical tensor named ``name`` (the checkpoint's own
name, e.g. ``model.layers.0.self_attn.q_proj.weight``) and an element's row-major index ``i`` in
that logical tensor (its checkpoint shape, never a fused or sharded layout; ``i < 2**32``):

    digest    = sha256(b"randopt-noise-v1\\0" + s.to_bytes(8, "little") + name.encode("utf-8"))
    ka, kb    = little-endian uint32 of digest[0:4] and digest[4:8]
    h         = fmix32(fmix32(i ^ ka) ^ kb)                     (all arithmetic mod 2**32)
    R(s,name,i) = +1 if (h >> 31) == 0 else -1

where fmix32 is MurmurHash3's finaliser:
    h ^= h >> 16; h *= 0x85EBCA6B; h ^= h >> 13; h *= 0xC2B2AE35; h ^= h >> 16.

Why this shape: the two keys come from a cryptographic hash on the host (once per tensor per seed),
so distinct (seed, tensor) pairs never share keys in practice (a 64-bit key); two rounds of fmix32
make i -> h a bijection per key pair with no shift structure between keys (one round over i ^ k
would make seed b's noise a xor-shuffled copy of seed a's whenever ka ^ kb < numel).

Perturbed weights: W = round_to_dtype(float32(W0) + float32(sigma) * R), computed in fp32 and
rounded to nearest even into the checkpoint dtype (bf16, fp16 or fp32).

Gaussian noise (perturbation.noise: gaussian; definition "gaussian v2")
---------------------------------------------------------------------------
The same counter-based hash, with its own domain string, so that a seed's Gaussian draws are
independent of its Rademacher signs:

    digest    = sha256(b"randopt-gauss-v2\\0" + s.to_bytes(8, "little") + name.encode("utf-8"))
    ka, kb    = little-endian uint32 of digest[0:4] and digest[4:8]
    h         = fmix32(fmix32(i ^ ka) ^ kb)
    k         = (h >> 16) & 0x7FFF                              (15 bits: the table's index)
    G(s,name,i) = T[k] if (h >> 31) == 0 else -T[k]              (float32; as bits: T_bits[k] | (h & 2**31))

    T[k]      = the float32 nearest to Phi^-1(1/2 + (2k + 1) / 2**17),  k = 0 .. 2**15 - 1

where Phi^-1 is the standard normal quantile. So G takes each of the 2**16 midpoint quantiles
Phi^-1((j + 1/2) / 2**16), j = 0 .. 2**16 - 1, with probability 2**-16: an inverse-CDF draw from the
top 16 bits of h. T is built once (in fp64 by statistics.NormalDist, every entry checked against a
50-digit mpmath quantile rounded to float32: tests/golden/make_gaussian_v2.py) and shipped as
randopt/kernels/gaussian_v2_table.f32 (little-endian float32), whose sha256 is pinned below: the code key
hashes this file's source (randopt/code_keys.py), so the pin puts the table in every key the noise is
in, and a table that does not match its pin is refused. Only integer operations and one table read
make a draw: no transcendental function, whose last bit differs between libm, CUDA and Triton.
Storing the positive half and taking the sign from bit 31 makes the distribution exactly symmetric
(the 2**16 values sum to 0), halves the table (128 KiB: it stays in a CPU core's L2) and applies the
sign as the Rademacher kernels do, by OR-ing bit 31 into the value's sign bit. T[0] = 1.91e-5,
T[2**15 - 1] = 4.3249 (the draws are bounded there); the table's variance is 0.99998.

Why 2**16 quantiles are enough at sigma <= 1e-2 in bf16: the table's step between neighbouring
values is 3.8e-5 at 0, 6.3e-5 at |G| = 1, 2.8e-4 at 2 and 3.5e-3 at 3 (1.3e-4 on average over
draws). Relative to the value (step / |G|) it is at most 2**-8 = 3.9e-3, the smallest relative ULP
of bf16, for 0.0098 <= |G| <= 3.42 (99.2 % of draws): there the noise sigma*G rounded to bf16 by
itself would lose more than the table does. Against the weights, the table's step is
sigma * 1.3e-4 <= 1.3e-6 on average at sigma <= 1e-2, 46 to 185 times below the bf16 ULP of a
weight of magnitude 0.01 to 0.05 (6.1e-5 to 2.4e-4). Measured: drawing the exact
continuous normal instead (uniform inside each table cell) gives another bf16 weight in 0.93 % of
elements at sigma = 1e-2 and 0.18 % at 1e-3 (W0 ~ N(0, 0.02**2)), nine in ten of those one bf16
step away; the mean change is 4e-5 sigma (bench/perturb/bench_perturb_cpu.py, "resolution").

Perturbed weights, for either noise: W = round_to_dtype(float32(W0) + rn32(float32(sigma) * N)),
N = R or G: the product is rounded to fp32 first, then the sum, then the result to the checkpoint
dtype (nearest even each time). For Rademacher the product is exact (+-sigma); for Gaussian it is
not, so a fused multiply-add (one rounding of W0 + sigma*G) would change the last bit of some fp32
sums and so some weights (1.8 % of fp32 weights, about one bf16 weight in 10^6: measured in
tests/test_kernel_gaussian.py). No implementation may contract it: numpy, numba and torch's eager ops
compute the product and the sum as two operations; the Triton kernels are compiled with
enable_fp_fusion=False for the Gaussian variant (randopt/kernels/perturb_triton.py).

In-place delta switch (an option; the default is the absolute reconstruct above): from (seed_a, sigma_a)
to (seed_b, sigma_b), W := round_to_dtype(float32(W) + d) with d = rn32(float32(sigma_b)*N_b) -
rn32(float32(sigma_a)*N_a) computed in fp32 (one fp32 subtraction; a side with sigma 0 is absent).
See delta_step. Under Rademacher noise its bf16/fp16 drift stays flat in the number of switches;
under Gaussian noise every switch adds a fresh rounding error and the drift grows like the square
root of the switches (randopt/kernels/README.md has both tables).
"""
from __future__ import annotations

import functools
import hashlib
from pathlib import Path

import numpy as np
import torch

from randopt.kernels.noise_kinds import GAUSSIAN, GAUSSIAN_VERSION, RADEMACHER, check_kind

NOISE_VERSION = 1
_MASK32 = 0xFFFFFFFF
_DOMAIN = b"randopt-noise-v1\0"
_DOMAINS = {RADEMACHER: _DOMAIN, GAUSSIAN: f"randopt-gauss-v{GAUSSIAN_VERSION}\0".encode()}
# The Gaussian table: T[k] for k < 2**15 as little-endian float32, pinned by its sha256 (the docstring).
GAUSSIAN_TABLE = Path(__file__).with_name(f"gaussian_v{GAUSSIAN_VERSION}_table.f32")
GAUSSIAN_TABLE_SHA256 = "6621a18f629e82396c088501c1095eae46f6d8033b42db7b4158e0f4cf34a0ce"
GAUSSIAN_TABLE_SIZE = 1 << 15
# Elements per chunk: 64K uint32 stay in L2 on the CPU path (4x faster than 1M chunks measured).
_CHUNK_CPU = 1 << 16
# Elements per chunk of the int64 torch path (GPU without Triton): bounds its temporaries.
_CHUNK_TORCH = 1 << 22


def tensor_keys(seed: int, name: str, noise: str = RADEMACHER) -> tuple[int, int]:
    """The two uint32 keys (ka, kb) of one (seed, logical tensor) under one noise kind."""
    if not 0 <= int(seed) < 2**63:
        raise ValueError(f"seed must be an integer in [0, 2**63), got {seed!r}")
    domain = _DOMAINS[check_kind(noise)]
    digest = hashlib.sha256(domain + int(seed).to_bytes(8, "little") + name.encode("utf-8")).digest()
    return int.from_bytes(digest[0:4], "little"), int.from_bytes(digest[4:8], "little")


def tensor_keys_many(seed: int, names: list[bytes], noise: str = RADEMACHER) -> np.ndarray:
    """tensor_keys for many tensors at once: a (len(names), 2) uint32 array of (ka, kb); names are
    the UTF-8 encoded tensor names. Same definition, one sha256 per name, no per-key Python ints."""
    if not 0 <= int(seed) < 2**63:
        raise ValueError(f"seed must be an integer in [0, 2**63), got {seed!r}")
    prefix = _DOMAINS[check_kind(noise)] + int(seed).to_bytes(8, "little")
    digests = b"".join([hashlib.sha256(prefix + name).digest()[:8] for name in names])
    return np.frombuffer(digests, dtype="<u4").reshape(len(names), 2)


@functools.lru_cache(maxsize=1)
def gaussian_table_bits() -> np.ndarray:
    """T's float32 bits (uint32, read-only), read once and checked against the pinned sha256."""
    try:
        data = GAUSSIAN_TABLE.read_bytes()
    except FileNotFoundError:
        raise FileNotFoundError(f"{GAUSSIAN_TABLE}: the Gaussian noise's table is missing; it is part of the code "
                                "(restore it from git: git checkout -- randopt/kernels/)") from None
    digest = hashlib.sha256(data).hexdigest()
    if digest != GAUSSIAN_TABLE_SHA256 or len(data) != 4 * GAUSSIAN_TABLE_SIZE:
        raise ValueError(f"{GAUSSIAN_TABLE}: sha256 {digest}, but the Gaussian definition pins "
                         f"{GAUSSIAN_TABLE_SHA256}; restore the file from git (a seed must keep its weights: "
                         "never rebuild the table to make a check pass)")
    bits = np.frombuffer(data, dtype="<u4").astype(np.uint32)
    bits.flags.writeable = False
    return bits


def gaussian_table() -> np.ndarray:
    """T as float32 (read-only): the positive half of the 2**16 midpoint quantiles, increasing."""
    return gaussian_table_bits().view(np.float32)


_TORCH_TABLES: dict[torch.device, torch.Tensor] = {}


def gaussian_table_on(device: torch.device) -> torch.Tensor:
    """T as a float32 tensor on ``device`` (kept: one copy per device)."""
    device = torch.device(device)
    table = _TORCH_TABLES.get(device)
    if table is None:
        table = _TORCH_TABLES[device] = torch.from_numpy(gaussian_table().copy()).to(device)
    return table


def fmix32_int64(h: torch.Tensor) -> torch.Tensor:
    """MurmurHash3 fmix32 on uint32 values held in an int64 tensor (products wrap mod 2**64,
    and masking keeps the low 32 bits, which is exactly uint32 arithmetic)."""
    h = h ^ (h >> 16)
    h = (h * 0x85EBCA6B) & _MASK32
    h = h ^ (h >> 13)
    h = (h * 0xC2B2AE35) & _MASK32
    return h ^ (h >> 16)


def _fmix32_np_(h: np.ndarray) -> None:
    """fmix32 in place on a uint32 array (numpy uint32 arithmetic wraps mod 2**32)."""
    h ^= h >> np.uint32(16)
    h *= np.uint32(0x85EBCA6B)
    h ^= h >> np.uint32(13)
    h *= np.uint32(0xC2B2AE35)
    h ^= h >> np.uint32(16)


def hash_index(index: np.ndarray, ka: int, kb: int) -> np.ndarray:
    """CPU: h = fmix32(fmix32(i ^ ka) ^ kb) (uint32) at logical indices ``index`` (any integer array,
    values < 2**32), through numpy uint32 arithmetic."""
    h = index.astype(np.uint32)  # always a copy: hashed in place below
    h ^= np.uint32(ka)
    _fmix32_np_(h)
    h ^= np.uint32(kb)
    _fmix32_np_(h)
    return h


def negative_mask_index(index: np.ndarray, ka: int, kb: int) -> np.ndarray:
    """CPU: the bool array R == -1 at logical indices ``index`` (any integer array, values < 2**32),
    through numpy uint32 arithmetic."""
    return (hash_index(index, ka, kb) >> np.uint32(31)).astype(np.bool_)


def gaussian_bits_of_hash(h: np.ndarray) -> np.ndarray:
    """G's float32 bits (uint32) for hashes h: T_bits[(h >> 16) & 0x7FFF] | (h & 2**31)."""
    return gaussian_table_bits()[(h >> np.uint32(16)) & np.uint32(0x7FFF)] | (h & np.uint32(0x80000000))


def gaussian_index(index: np.ndarray, ka: int, kb: int) -> np.ndarray:
    """CPU: G (float32) at logical indices ``index`` (any integer array, values < 2**32)."""
    return gaussian_bits_of_hash(hash_index(index, ka, kb)).view(np.float32)


def negative_mask(index: torch.Tensor, ka: int, kb: int) -> torch.Tensor:
    """The bool mask R == -1 at logical indices ``index`` (int64, any shape), on index's device:
    numpy uint32 on the CPU (fast), int64 torch arithmetic elsewhere."""
    if index.device.type == "cpu":
        return torch.from_numpy(negative_mask_index(index.numpy(), ka, kb))
    return (hash_bits(index.to(torch.int64), ka, kb) >> 31).bool()


def hash_bits(index: torch.Tensor, ka: int, kb: int) -> torch.Tensor:
    """h = fmix32(fmix32(i ^ ka) ^ kb) for int64 indices in [0, 2**32)."""
    return fmix32_int64(fmix32_int64(index ^ ka) ^ kb)


def gaussian_noise(index: torch.Tensor, ka: int, kb: int) -> torch.Tensor:
    """G (float32) at logical indices ``index`` (int64, any shape), on index's device: numpy uint32
    on the CPU (fast), int64 torch arithmetic elsewhere (gaussian_noise_torch)."""
    if index.device.type == "cpu":
        return torch.from_numpy(gaussian_index(index.numpy(), ka, kb))
    return gaussian_noise_torch(index, ka, kb)


def gaussian_noise_torch(index: torch.Tensor, ka: int, kb: int) -> torch.Tensor:
    """G through int64 torch arithmetic and a table gather, on any device (the GPU path without
    Triton; tests run it on the CPU). Negating T[k] sets the sign bit the definition ORs in (T[k] > 0)."""
    h = hash_bits(index.to(torch.int64), ka, kb)
    magnitude = gaussian_table_on(index.device)[(h >> 16) & 0x7FFF]
    return torch.where((h >> 31).bool(), -magnitude, magnitude)


def rademacher(seed: int, name: str, index: torch.Tensor) -> torch.Tensor:
    """R(seed, name, i) in {-1.0, +1.0} (float32) for the logical indices ``index`` (int64)."""
    ka, kb = tensor_keys(seed, name)
    h = hash_bits(index.to(torch.int64), ka, kb)
    return 1.0 - 2.0 * (h >> 31).to(torch.float32)


def gaussian(seed: int, name: str, index: torch.Tensor) -> torch.Tensor:
    """G(seed, name, i) (float32) for the logical indices ``index`` (int64)."""
    return gaussian_noise(index, *tensor_keys(seed, name, GAUSSIAN))


def sigma_f32(sigma: float) -> float:
    """sigma as the fp32 value every implementation uses (round to nearest even)."""
    return torch.tensor(sigma, dtype=torch.float32).item()


def _signed(negative: torch.Tensor, sig: float) -> torch.Tensor:
    """sigma * R in fp32 (exactly +-sigma_f32)."""
    plus = torch.tensor(sig, dtype=torch.float32, device=negative.device)
    return torch.where(negative, -plus, plus)


def _scaled(noise: torch.Tensor, sig: float) -> torch.Tensor:
    """rn32(sigma * G): one fp32 multiply (an eager torch op: never fused with the add after it)."""
    return noise * torch.tensor(sig, dtype=torch.float32, device=noise.device)


def noise_step(index: torch.Tensor, keys: tuple[int, int], sigma: float, noise: str) -> torch.Tensor:
    """rn32(fp32(sigma) * N) (float32) at logical indices ``index`` (int64, any shape), N the noise
    of kind ``noise`` under ``keys`` = tensor_keys(seed, name, noise)."""
    if noise == GAUSSIAN:
        return _scaled(gaussian_noise(index, *keys), sigma_f32(sigma))
    return _signed(negative_mask(index, *keys), sigma_f32(sigma))


def _step_chunk(start: int, stop: int, keys: tuple[int, int], sigma: float, noise: str,
                device: torch.device) -> torch.Tensor:
    """noise_step for the logical index range start..stop-1, computed on ``device``."""
    if device.type == "cpu":
        index = np.arange(start, stop, dtype=np.uint32)
        if noise == GAUSSIAN:
            return _scaled(torch.from_numpy(gaussian_index(index, *keys)), sigma_f32(sigma))
        return _signed(torch.from_numpy(negative_mask_index(index, *keys)), sigma_f32(sigma))
    return noise_step(torch.arange(start, stop, dtype=torch.int64, device=device), keys, sigma, noise)


def check_logical_numel(name: str, n: int) -> None:
    if n >= 2**32:
        raise ValueError(f"{name}: {n} elements; the noise index is 32-bit (at most 2**32 - 1 elements)")


def reconstruct_reference_(live: torch.Tensor, base: torch.Tensor, seed: int, sigma: float, name: str,
                           noise: str = RADEMACHER) -> None:
    """live := base + sigma * N(seed, name, ·) for a whole logical tensor, in place, bit-exact
    (N: the noise of kind ``noise``, Rademacher by default).

    ``live`` and ``base`` have the logical (checkpoint) shape; ``live`` keeps its storage, so
    views of it held by a model (tied embeddings, CUDA graphs) see the new values.
    """
    if live.shape != base.shape or live.dtype != base.dtype:
        raise ValueError(f"{name}: live {tuple(live.shape)}/{live.dtype} does not match base "
                         f"{tuple(base.shape)}/{base.dtype}")
    n = base.numel()
    check_logical_numel(name, n)
    keys = tensor_keys(seed, name, noise)
    flat_live, flat_base = live.view(-1), base.reshape(-1)
    chunk = _CHUNK_CPU if base.device.type == "cpu" else _CHUNK_TORCH
    for start in range(0, n, chunk):
        stop = min(n, start + chunk)
        step = _step_chunk(start, stop, keys, sigma, noise, base.device)
        # fp32 add, then one round-to-nearest-even into the storage dtype.
        flat_live[start:stop] = (flat_base[start:stop].to(torch.float32) + step).to(live.dtype)


def delta_step(step_to: torch.Tensor | None, step_from: torch.Tensor | None) -> torch.Tensor:
    """The fp32 increment of one in-place switch: d = rn32(sigma_to*N_to) - rn32(sigma_from*N_from).

    Each side is a noise_step (for Rademacher exactly +-sigma_f32); an absent side (sigma 0, or the
    base) is None and contributes nothing, so d is one side, its negation, or one fp32 subtraction."""
    ref = step_to if step_to is not None else step_from
    d = step_to if step_to is not None else torch.zeros(ref.shape, dtype=torch.float32, device=ref.device)
    if step_from is not None:
        d = d - step_from
    return d


def delta_switch_reference_(live: torch.Tensor, name: str, seed_from: int | None, sigma_from: float,
                            seed_to: int | None, sigma_to: float, noise: str = RADEMACHER) -> None:
    """In-place switch live := rne(fp32(live) + d), d = delta_step(...) (see delta_step), bit-exact.

    Switching base -> seed is (None, 0, seed, sigma); seed -> base is (seed, sigma, None, 0). Unlike
    the absolute reconstruct this drifts in bf16/fp16: rounding errors of successive switches stay.
    """
    sigma_from = 0.0 if seed_from is None else sigma_from
    sigma_to = 0.0 if seed_to is None else sigma_to
    if sigma_from == 0 and sigma_to == 0:
        return
    n = live.numel()
    check_logical_numel(name, n)
    keys_to = tensor_keys(seed_to, name, noise) if sigma_to != 0 else None
    keys_from = tensor_keys(seed_from, name, noise) if sigma_from != 0 else None
    flat = live.view(-1)
    chunk = _CHUNK_CPU if live.device.type == "cpu" else _CHUNK_TORCH
    for start in range(0, n, chunk):
        stop = min(n, start + chunk)
        step_to = _step_chunk(start, stop, keys_to, sigma_to, noise, live.device) if keys_to else None
        step_from = _step_chunk(start, stop, keys_from, sigma_from, noise, live.device) if keys_from else None
        d = delta_step(step_to, step_from)
        flat[start:stop] = (flat[start:stop].to(torch.float32) + d).to(live.dtype)
