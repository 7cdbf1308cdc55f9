"""The one switch between members (and back to the base model) that every stage uses, and the delta
switch's drift read after a stage's walk."""
from __future__ import annotations

from randopt.engines.base import Completion, Engine
from randopt.population import BASE


def switch_weights(engine: Engine, seed: int, sigma: float) -> None:
    """Set the engine's weights to member (seed, sigma), or back to the base weights for seed == BASE."""
    if seed == BASE:
        engine.restore_base()
    else:
        engine.set_weights(seed, sigma)


def generate_each(engine: Engine, members: list[tuple[int, float]], prompts: list[str], max_tokens: int,
                  stop: list[str]) -> list[list[Completion]]:
    """Engine.generate_members member by member: switch to each, then generate (nothing for no prompts)."""
    out = []
    for seed, sigma in members:
        switch_weights(engine, seed, sigma)
        out.append(engine.generate(prompts, max_tokens, stop) if prompts else [])
    return out


def engine_drift(engine: Engine | None) -> dict | None:
    """The delta switch's drift after this stage's walk (the engine goes back to base to measure it), or
    None: no engine was loaded, or its switch is the exact reconstruct."""
    drift = getattr(engine, "drift", None)
    return drift() if drift is not None else None
