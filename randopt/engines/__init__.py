"""Engines: one small protocol (base.py), a torch/transformers implementation (the embedded
default) and a vLLM one for GPUs. ``make_engine`` picks by config."""
from __future__ import annotations

from randopt.engines.base import Completion, Engine, TextLogprobs


def make_engine(kind: str, model_dir: str, **options) -> Engine:
    if kind == "torch":
        from randopt.engines.torch_engine import TorchEngine
        return TorchEngine(model_dir, **options)
    if kind == "vllm":
        try:
            from randopt.engines.vllm_engine import VllmEngine
        except ImportError as err:
            raise RuntimeError(f"engine 'vllm' needs vllm installed on a CUDA machine ({err}); "
                               "use engine: torch on a CPU") from err
        return VllmEngine(model_dir, **options)
    raise ValueError(f"unknown engine {kind!r}; choose 'torch' or 'vllm'")


__all__ = ["Completion", "Engine", "TextLogprobs", "make_engine"]
