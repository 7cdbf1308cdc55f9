"""make_engine: the engine a config names, and the engines this process made, closed together when a
stage CLI exits (randopt/runtime/cli.py)."""
from __future__ import annotations

from randopt.engines.base import Engine


# Engines made in this process, so that a stage CLI closes them all before it exits (randopt/runtime/cli.py).
_OPEN: list[Engine] = []


def engine_class(kind: str) -> type:
    """The engine class of a kind, its libraries imported (a resident server imports them before it
    waits its turn to build the engine: randopt/runtime/resident/start_lock.py)."""
    if kind == "torch":
        from randopt.engines.torch_engine import TorchEngine
        return TorchEngine
    if kind == "vllm":
        try:
            from randopt.engines.vllm_engine import VllmEngine
        except ImportError as err:
            raise RuntimeError(f"engine 'vllm' needs vllm installed on a CUDA machine ({err}); "
                               "use engine: torch on a CPU") from err
        return VllmEngine
    raise ValueError(f"unknown engine {kind!r}; choose 'torch' or 'vllm'")


def make_engine(kind: str, model_dir: str, **options) -> Engine:
    return track(engine_class(kind)(model_dir, **options))


def track(engine: Engine) -> Engine:
    """Close this engine (or handle on a resident one, randopt/runtime/resident/) when the stage CLI exits."""
    _OPEN.append(engine)
    return engine


def close_engines() -> None:
    while _OPEN:
        _OPEN.pop().close()
