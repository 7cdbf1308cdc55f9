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
    """The engine, once its model dir's files are checked against the prepared model's manifest, before
    and after the load (randopt/model/served.py): an engine never serves weights other than the ones
    the run's keys name."""
    from randopt.io import InputError
    from randopt.model.served import served_sha256

    before = served_sha256(model_dir)
    engine = engine_class(kind)(model_dir, **options)
    if served_sha256(model_dir) != before:
        engine.close()
        raise InputError(f"{model_dir}: the model's files changed while the engine loaded them; run the stage again")
    return track(engine)


def track(engine: Engine) -> Engine:
    """Close this engine (or handle on a resident one, randopt/runtime/resident/) when the stage CLI exits."""
    _OPEN.append(engine)
    return engine


def close_engines() -> None:
    while _OPEN:
        _OPEN.pop().close()
