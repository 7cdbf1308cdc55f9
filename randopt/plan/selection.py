"""selection.mode auto in the run's plan: full evaluation or racing, decided from the engines the run has on its
host (randopt/plan/engines.py) and the measurements randopt/plan/auto_selection.py holds, before the run's keys, which
hold the mode under racing. A mode the config gives is kept as it is."""
from __future__ import annotations

from randopt.config import ConfigError, validate
from randopt.plan.engines import EnginePlan, model_weight_bytes
from randopt.population import Population
from randopt.plan.engine_slots import gains
from randopt.plan.auto_selection import SearchShape, SelectionChoice, choose, engine_start_s
from randopt.selection.plan import RacePlan


def with_mode(config: dict, mode: str) -> dict:
    """The config with another selection.mode (its other selection knobs kept)."""
    return config | {"selection": config["selection"] | {"mode": mode}}


def plan_selection(config: dict, engines: EnginePlan, population: Population, max_tokens: int,
                   model_dir: str) -> SelectionChoice | None:
    """What selection.mode auto takes on this host (None where the config gives the mode): full where the config's
    other knobs refuse racing (randopt/config.py), else auto's estimate on the engine slots, the engines side by
    side and their gain, whether jobs find a loaded engine, and full evaluation's shards in order."""
    if config["selection"]["mode"] != "auto":
        return None
    try:
        racing = validate(with_mode(config, "racing"))
    except ConfigError as err:
        return SelectionChoice("full", f"auto: full; racing is refused here: {err}")
    gpus = engines.gpus_per_job
    weights = (model_weight_bytes(config, model_dir) or 0) / gpus if gpus else 0
    side_by_side = engines.engines_per_gpu if engines.side_by_side else 1
    kind = config["engine"]["kind"]
    shape = SearchShape(kind, "cuda" if gpus else "cpu", weights or None, max_tokens, config["engine"]["batch_size"],
                        slots=engines.slots, engines_per_gpu=side_by_side,
                        # engines side by side on a CPU split its cores: no gain measured there
                        gain=gains(weights, engines.mps_on, engines.card)[0][side_by_side] if side_by_side > 1 and weights
                        else 1.0,
                        resident=bool(engines.keep_loaded_s), start_s=engine_start_s(kind, engines.mps_on),
                        card=engines.card)
    shards = [last - first + 1 for _ in population.sigmas for first, last in population.shard_ranges()]
    return choose(RacePlan.from_config(racing, parallel=engines.slots), shape, shards)
