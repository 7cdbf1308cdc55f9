"""make_engine: the engine a config names, and the engines this process made, closed together when a
stage CLI exits (randopt/runtime/cli.py)."""
from __future__ import annotations

from randopt.engines.base import Engine


# Engines made in this process, so that a stage CLI closes them all before it exits (randopt/runtime/cli.py).
_OPEN: list[Engine] = []


def make_engine(kind: str, model_dir: str, **options) -> Engine:
    if kind == "torch":
        from randopt.engines.torch_engine import TorchEngine
        engine = TorchEngine(model_dir, **options)
    elif kind == "vllm":
        try:
            from randopt.engines.vllm_engine import VllmEngine
        except ImportError as err:
            raise RuntimeError(f"engine 'vllm' needs vllm installed on a CUDA machine ({err}); "
                               "use engine: torch on a CPU") from err
        engine = VllmEngine(model_dir, **options)
    else:
        raise ValueError(f"unknown engine {kind!r}; choose 'torch' or 'vllm'")
    return track(engine)


def track(engine: Engine) -> Engine:
    """Close this engine (or handle on a resident one, randopt/runtime/resident/) when the stage CLI exits."""
    _OPEN.append(engine)
    return engine


def close_engines() -> None:
    while _OPEN:
        _OPEN.pop().close()
