"""What a member costs a GPU at the speed of light: bytes, FLOPs and noise draws per member for prefill and decode,
and the members/s each resource alone would allow, for one weight copy per member (today's engines) and for M
members on one base copy with the noise made inside the matmul (issue 70's member-batched engine).

Why three resources and not two: a member-batched step reads W0 once for M members, but every member's effective
weight is made anew from the counter hash on every step (randopt/kernels/member_linear_triton.py), two fmix32
rounds an element a member, on the SMs' integer ALUs. That is not free beside the tensor cores: the switch kernels'
compute-bound delta switch made 1.19e12 noise draws/s on an H200 (bench/results/perturb/perturb_h200.json), so one
member's ~1.5e9 draws take ~1.3 ms a step, more than reading its 3.1 GB copy (0.93 ms on an H100). The model
says so rather than assume the hash is free; bench/roofline/fused_linear_bench.py measures the kernel's own rate.

Pure Python, no randopt imports: bench scripts on a bare device load it by path. Numbers of a card are in CARDS
with their sources; everything else comes from the caller (a config.json's shape, a protocol from committed
records: bench/roofline/roofline.py).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Card:
    """One GPU's peaks. hbm_bytes_s: DRAM bandwidth; bf16_flops_s: dense bf16 tensor-core FLOP/s (no sparsity);
    noise_draws_s: noise elements the SMs make per second (hash + add + round), as measured; memory_bytes: what the
    card holds (randopt/engines/memory.py CARD_BYTES' readings; tests/test_roofline.py keeps them equal)."""
    name: str
    hbm_bytes_s: float
    bf16_flops_s: float
    noise_draws_s: float
    sources: str
    memory_bytes: int = 0


# The H100 and H200 are one die (GH100: 132 SMs, 1.98 GHz boost), so the SMs' noise rate is one number; the H200
# measured it, the H100's is that number until fused_linear_bench.py reads it there.
_NOISE_RATE_H200 = 2 * 7_615_616_512 / 12.821e-3   # delta switch, two draws an element, compute-bound
CARDS = {
    "h100": Card("NVIDIA H100 SXM5 80GB", 3.35e12, 989.4e12, _NOISE_RATE_H200,
                 "NVIDIA H100 datasheet (SXM5): HBM3 3.35 TB/s, BF16 tensor core 1,979 TFLOPS with sparsity, so "
                 "989 dense; noise rate: the H200's (same GH100 die, 132 SMs), bench/results/perturb/perturb_h200.json",
                 memory_bytes=81_559 << 20),
    "h200": Card("NVIDIA H200 SXM 141GB", 4.8e12, 989.4e12, _NOISE_RATE_H200,
                 "NVIDIA H200 datasheet (SXM): HBM3e 4.8 TB/s, BF16 tensor core 1,979 TFLOPS with sparsity, so 989 "
                 "dense; noise rate: bench/results/perturb/perturb_h200.json, SwitchPlan delta switch of a 7,615,616,512-"
                 "element set in 12.821 ms, two draws an element (compute-bound: its bytes take 6.3 ms)",
                 memory_bytes=150_754_820_096),
}


def card_key(device_name: str) -> str | None:
    """CARDS' key for a device name as torch or NVML gives it ('NVIDIA H100 80GB HBM3'), or None."""
    name = device_name.upper()
    return "h200" if "H200" in name else "h100" if "H100" in name else None


@dataclass(frozen=True)
class Shape:
    """What the cost of a Llama-style decoder (Llama, Qwen2) depends on, from its config.json."""
    hidden: int
    layers: int
    intermediate: int
    heads: int
    kv_heads: int
    vocab: int
    tied_embeddings: bool
    dtype_bytes: int = 2

    @classmethod
    def from_config(cls, config: dict, dtype_bytes: int = 2) -> Shape:
        return cls(hidden=int(config["hidden_size"]), layers=int(config["num_hidden_layers"]),
                   intermediate=int(config["intermediate_size"]), heads=int(config["num_attention_heads"]),
                   kv_heads=int(config.get("num_key_value_heads", config["num_attention_heads"])),
                   vocab=int(config["vocab_size"]), tied_embeddings=bool(config.get("tie_word_embeddings", False)),
                   dtype_bytes=dtype_bytes)

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def layer_linears(self) -> dict[str, tuple[int, int]]:
        """(out, in) of one layer's projections."""
        kv = self.kv_heads * self.head_dim
        return {"q": (self.hidden, self.hidden), "k": (kv, self.hidden), "v": (kv, self.hidden),
                "o": (self.hidden, self.hidden), "gate": (self.intermediate, self.hidden),
                "up": (self.intermediate, self.hidden), "down": (self.hidden, self.intermediate)}

    @property
    def layer_matmul_params(self) -> int:
        return sum(o * i for o, i in self.layer_linears().values())

    @property
    def matmul_params(self) -> int:
        """Weights every token multiplies by: the layers' projections and the output layer (the embedding
        lookup reads one row a token and is left out; biases and norms are a rounding error)."""
        return self.layers * self.layer_matmul_params + self.vocab * self.hidden

    @property
    def kv_bytes_per_token(self) -> int:
        """KV cache a token of context holds: K and V, every layer."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes


@dataclass(frozen=True)
class Protocol:
    """One member's work: ``problems`` prompts of ``prompt_tokens`` each, decoded together (one call), answers of
    the lengths in ``answer_lengths`` ((tokens, share) pairs, shares summing to 1) and at most ``max_tokens``.
    A call lasts as many decode steps as its longest answer: decode_steps (None: max_tokens, which every
    member-call of the real 1.5B reached)."""
    problems: int
    prompt_tokens: float
    answer_lengths: Sequence[tuple[float, float]]
    max_tokens: int
    decode_steps: int | None = None

    def __post_init__(self) -> None:
        total = sum(s for _, s in self.answer_lengths)
        if not math.isclose(total, 1.0, abs_tol=1e-6):
            raise ValueError(f"answer length shares sum to {total}, not 1")
        if any(n < 0 or n > self.max_tokens for n, _ in self.answer_lengths):
            raise ValueError("an answer length outside [0, max_tokens]")

    @property
    def steps(self) -> int:
        return self.max_tokens if self.decode_steps is None else self.decode_steps

    @property
    def mean_answer(self) -> float:
        return sum(n * s for n, s in self.answer_lengths)

    @property
    def mean_context_reads(self) -> float:
        """Context tokens an answer's decode steps read from the KV cache, over its steps t = 1..n: the prompt
        and the t - 1 tokens before it, so n * prompt + n (n - 1) / 2; the mean over answers."""
        return sum(s * (n * self.prompt_tokens + n * (n - 1) / 2) for n, s in self.answer_lengths)


@dataclass(frozen=True)
class MemberCost:
    """One member's resources. Weights are read once a decode step for the whole member (its rows share the
    read) and once for its prefill; with M members on one base copy, a step's weight read is shared by M."""
    prefill_tokens: float
    prefill_flops: float
    decode_steps: int
    decode_tokens: float
    decode_flops: float
    weight_bytes: float          # one copy of the matmul weights
    kv_read_bytes: float         # the decode steps' attention reads of the KV cache
    noise_draws_per_step: float  # elements a member's effective weights hold (fused: hashed every step)

    def bytes(self, members_per_copy: int = 1, own_bytes_per_read: float = 0.0) -> float:
        """DRAM bytes per member: weights once for prefill and once a step, divided over the members sharing a
        copy, plus what the member reads of its own each time (own_bytes_per_read: its packed signs), plus its KV
        reads."""
        reads = 1 + self.decode_steps
        return reads * (self.weight_bytes / members_per_copy + own_bytes_per_read) + self.kv_read_bytes

    @property
    def sign_bytes(self) -> float:
        """A member's Rademacher signs packed one bit an element: what it would read a step in place of its
        copy, if its signs were drawn once (by the switch's hash, so the same weights) and kept."""
        return self.noise_draws_per_step / 8

    @property
    def flops(self) -> float:
        return self.prefill_flops + self.decode_flops

    @property
    def noise_draws_fused(self) -> float:
        """Draws a member costs when its weights are made in the matmul: every step and the prefill."""
        return (1 + self.decode_steps) * self.noise_draws_per_step


def kv_bytes_per_member(shape: Shape, protocol: Protocol) -> float:
    """The KV cache a member's call holds at most: every row at its prompt plus max_tokens (a static cache; a paged
    one frees a row's blocks as it finishes, so this bounds it)."""
    return protocol.problems * (protocol.prompt_tokens + protocol.max_tokens) * shape.kv_bytes_per_token


def members_that_fit(shape: Shape, protocol: Protocol, card: Card, packed_signs: bool = True,
                     reserve_bytes: float = 8e9) -> int:
    """M for a member-batched engine on one card: one base copy, and per member its KV cache at most (and its packed
    signs); reserve_bytes for activations, logits, the CUDA context and the allocator's slack."""
    base = (shape.matmul_params + shape.vocab * shape.hidden) * shape.dtype_bytes
    per_member = kv_bytes_per_member(shape, protocol) + (shape.matmul_params / 8 if packed_signs else 0)
    return max(0, math.floor((card.memory_bytes - base - reserve_bytes) / per_member))


def member_cost(shape: Shape, protocol: Protocol) -> MemberCost:
    """A member's bytes, FLOPs and noise draws under the protocol (2 FLOPs a weight a token; attention's own
    FLOPs, 4 * context * hidden a token a layer, are added to the decode and prefill)."""
    p = shape.matmul_params
    prefill_tokens = protocol.problems * protocol.prompt_tokens
    decode_tokens = protocol.problems * protocol.mean_answer
    attention = 4 * shape.layers * shape.hidden   # QK^T and PV, per context token per query token
    prefill_attention = attention * protocol.problems * protocol.prompt_tokens ** 2 / 2
    decode_attention = attention * protocol.problems * protocol.mean_context_reads
    return MemberCost(
        prefill_tokens=prefill_tokens, prefill_flops=2 * p * prefill_tokens + prefill_attention,
        decode_steps=protocol.steps, decode_tokens=decode_tokens, decode_flops=2 * p * decode_tokens + decode_attention,
        weight_bytes=p * shape.dtype_bytes,
        kv_read_bytes=protocol.problems * protocol.mean_context_reads * shape.kv_bytes_per_token,
        noise_draws_per_step=p)


@dataclass(frozen=True)
class Bounds:
    """members/s if one resource alone limited, and the least of them (the roofline)."""
    bandwidth: float
    compute: float
    noise: float

    @property
    def roofline(self) -> float:
        return min(self.bandwidth, self.compute, self.noise)

    @property
    def bound_by(self) -> str:
        named = {"bandwidth": self.bandwidth, "compute": self.compute, "noise": self.noise}
        return min(named, key=named.get)

    def as_record(self) -> dict:
        return asdict(self) | {"roofline": self.roofline, "bound_by": self.bound_by}


def bounds_per_copy(cost: MemberCost, card: Card) -> Bounds:
    """Today: each member reads its own materialised copy, once for its prefill and once a decode step, and the
    switch that makes it reads the base and writes the copy (2 more weight reads; its noise, one draw an element
    once a member, is the noise bound here)."""
    return Bounds(bandwidth=card.hbm_bytes_s / (cost.bytes(1) + 2 * cost.weight_bytes),
                  compute=card.bf16_flops_s / cost.flops, noise=card.noise_draws_s / cost.noise_draws_per_step)


def bounds_member_batched(cost: MemberCost, card: Card, members: int) -> Bounds:
    """M members on one base copy, the noise made in the matmul every step (and the prefill) for every member."""
    return Bounds(bandwidth=card.hbm_bytes_s / cost.bytes(members), compute=card.bf16_flops_s / cost.flops,
                  noise=card.noise_draws_s / cost.noise_draws_fused)


def bounds_member_batched_signs(cost: MemberCost, card: Card, members: int) -> Bounds:
    """M members on one base copy, each member's Rademacher signs drawn once (the switch's hash: the same weights)
    and kept packed, read every step beside W0. Not built: the bound says what it would be worth. The unpacking
    (a shift, a select, the fp32 add and the rounding an element a member, every step) is ALU work this bound
    leaves out; the kernel that measures it does not exist yet."""
    return Bounds(bandwidth=card.hbm_bytes_s / cost.bytes(members, cost.sign_bytes),
                  compute=card.bf16_flops_s / cost.flops, noise=card.noise_draws_s / cost.noise_draws_per_step)
