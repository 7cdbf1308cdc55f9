"""Engines side by side on one device (engine.engines_per_gpu): how many, whether they fit, and each
one's share of the card.

A small model leaves a GPU idle between its decode steps (most of a step is fixed host cost), so
several engines on one GPU, each answering its own members, raise members/s; a large model's steps
already keep the GPU busy, and a second engine buys nothing. Measured on one H200 with vLLM 0.25
(bench/engines_per_gpu/README.md): SmolLM2-135M (0.27 GB of bf16 weights) gave 1.57x one engine's
members/s with 2 engines and 1.76-1.83x with 3 to 8 (the GPU then busy 93-97 % of the time); a
7B-shaped model (15 GB) gave 0.97x with 2 and with 3. So `auto` takes 3 for weights up to
AUTO_SMALL_BYTES a GPU (past 3 engines SmolLM2 gained under 4 % more, for another engine start each)
and 1 elsewhere, which is never slower than one engine; sizes between the two measured points are
not measured, and get 1.

The number never changes a result: a seed means the same weights in every engine, and each member
is answered by one engine. It is in no key and no rule's params (rules/common.smk passes it in the
shell command), so changing it reruns nothing.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

AUTO_SMALL_BYTES = 1 << 30   # weights per GPU up to this: auto takes AUTO_SMALL_ENGINES
AUTO_SMALL_ENGINES = 3
HEADROOM = 0.90              # the share of a card the engines may take together (vLLM's own default)
MIN_KV_SHARE = 0.02          # the least KV cache an engine needs, as a share of the card (a member's batch)
# What each engine's process holds besides weights and KV cache (CUDA context, graphs, activations):
# an estimate; three 7B-shaped engines on an H200 held 44.4 GiB each with 28.3 GiB of weights and base copy.
OVERHEAD_BYTES = 3 << 29     # 1.5 GiB


@dataclass(frozen=True)
class EngineLayout:
    """Engines per device for this run, and why."""
    per_device: int
    why: str

    def as_record(self) -> dict:
        return {"engines_per_gpu": self.per_device, "why": self.why}


def resolve(requested, *, gpus_per_engine: int, on_cluster: bool, weight_bytes: int | None) -> EngineLayout:
    """engine.engines_per_gpu (auto or N >= 1) for one run. gpus_per_engine: 0 for the CPU;
    weight_bytes: the model's weight bytes (None when unknown when the DAG is built)."""
    if on_cluster:
        if requested not in ("auto", 1):
            raise ValueError(f"engine.engines_per_gpu is {requested}, but on a cluster each job is one engine "
                             f"(its own GPU and process); set it to 1 or auto there, or run locally with "
                             f"--resources gpu=N")
        return EngineLayout(1, "a cluster job runs one engine")
    if requested != "auto":
        return EngineLayout(int(requested), f"engine.engines_per_gpu: {requested}")
    if not gpus_per_engine:
        return EngineLayout(1, "auto on the CPU: one engine job takes every core")
    if weight_bytes is None:
        return EngineLayout(1, "auto: the model's size is unknown when the DAG is built (prepare it first), so one "
                               "engine, never slower")
    per_gpu = weight_bytes / gpus_per_engine
    if per_gpu <= AUTO_SMALL_BYTES:
        return EngineLayout(AUTO_SMALL_ENGINES, f"auto: {per_gpu / 2**30:.2f} GiB of weights a GPU leave it idle "
                            f"between steps; {AUTO_SMALL_ENGINES} engines gave 1.76x one on an H200 for SmolLM2 "
                            f"(bench/engines_per_gpu/README.md)")
    return EngineLayout(1, f"auto: {per_gpu / 2**30:.1f} GiB of weights a GPU keep it busy; a second engine gave "
                           f"0.97x for a 7B shape (bench/engines_per_gpu/README.md)")


def largest_fitting(weight_bytes_per_gpu: float, card_bytes: int) -> int:
    """The most engines whose weights, base copies and least KV caches fit HEADROOM of the card."""
    need = (2 * weight_bytes_per_gpu + OVERHEAD_BYTES) / card_bytes + MIN_KV_SHARE
    return int(HEADROOM // need)


def check_fit(n: int, weight_bytes_per_gpu: float, card_bytes: int) -> None:
    """A clear error when n engines cannot each hold weights, a base copy and a least KV cache."""
    most = largest_fitting(weight_bytes_per_gpu, card_bytes)
    if n > most:
        raise ValueError(
            f"engine.engines_per_gpu {n} does not fit: each engine holds {weight_bytes_per_gpu / 2**30:.2f} GiB of "
            f"weights, the same again as its base copy, about {OVERHEAD_BYTES / 2**30:.1f} GiB of CUDA context and "
            f"graphs and at least {MIN_KV_SHARE:.0%} of the card as KV cache, "
            f"and {HEADROOM:.0%} of a {card_bytes / 2**30:.0f} GiB card holds {most} such engines; set it to "
            f"{max(most, 1)} or less" + ("" if most else " (not even one fits: raise tensor_parallel_size)"))


def memory_utilization(n: int, weight_bytes_per_gpu: float, card_bytes: int) -> float:
    """vLLM's gpu_memory_utilization for each of n engines on one card: the card's HEADROOM split
    evenly, less every engine's base copy (which lives outside vLLM's budget)."""
    check_fit(n, weight_bytes_per_gpu, card_bytes)
    return round((HEADROOM - n * weight_bytes_per_gpu / card_bytes) / n, 3)


def weight_bytes(model_dir: str | Path) -> int | None:
    """The bytes of a model dir's safetensors weights, or None when it holds none (yet)."""
    files = list(Path(model_dir).glob("*.safetensors")) if Path(model_dir).is_dir() else []
    return sum(p.stat().st_size for p in files) or None
