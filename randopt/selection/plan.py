"""Racing's plan: the knobs, the checkpoints (problems seen per member after each round), the slice
of problems each round adds, and how many race_slice jobs a round has. Computed once when the DAG is
built (rules/common.smk) and handed to every racing job as JSON, so a job never recomputes it.

Rounds: the checkpoints (problems seen per member) grow geometrically, first_slice, first_slice *
growth, ... up to n, so a round costs about the same as the previous one while the field shrinks;
a last slice under half the previous one is folded into it (one round = one wave of jobs). With the
torch engine each checkpoint is rounded up to whole answer blocks of engine.batch_size problems
(randopt/scoring/answer_blocks.py), so a slice is batched exactly as full evaluation batches it.

The knobs, their defaults and meanings: config/schema.yaml, block selection (the one source of
defaults); docs/racing.md says how the rounds become Snakemake jobs (rules/racing.smk).
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field

import numpy as np

from randopt.io import InputError
from randopt.population import Population
from randopt.schema import load_schema, task_kind
from randopt.scoring.answer_blocks import block_size, problem_order

# The selection block's defaults, from the schema (mode included).
DEFAULTS = {key: spec["default"] for key, spec in load_schema()["properties"]["selection"]["properties"].items()}
RULES = ("bayes", "exact")


@dataclass(frozen=True)
class RacingConfig:
    """The racing knobs (config/schema.yaml, block selection, says what each one means)."""
    rule: str = DEFAULTS["rule"]
    first_slice: int = DEFAULTS["first_slice"]
    growth: float = DEFAULTS["growth"]
    miss_budget: float = DEFAULTS["miss_budget"]
    delta: float = DEFAULTS["delta"]
    order_seed: int = DEFAULTS["order_seed"]
    # Not a selection key: the engine's fixed answer block (randopt/scoring/answer_blocks.py; 1 for vLLM).
    # Checkpoints are whole blocks, so a racing slice batches each problem with the same problems
    # as full evaluation does.
    block: int = 1

    def __post_init__(self):
        if self.rule not in RULES:
            raise InputError(f"selection.rule must be one of {list(RULES)}, got {self.rule!r}")
        if not _is_int(self.first_slice) or self.first_slice < 2:
            raise InputError(f"selection.first_slice must be an integer >= 2 (a variance needs two answers), "
                             f"got {self.first_slice!r}")
        if not (_is_number(self.growth) and self.growth > 1 and math.isfinite(self.growth)):
            raise InputError(f"selection.growth must be a number > 1 (checkpoints must grow), got {self.growth!r}")
        for key in ("miss_budget", "delta"):
            value = getattr(self, key)
            if not (_is_number(value) and 0 < value < 1):
                raise InputError(f"selection.{key} must lie strictly between 0 and 1, got {value!r}")
        if not _is_int(self.order_seed) or self.order_seed < 0:
            raise InputError(f"selection.order_seed must be an integer >= 0, got {self.order_seed!r}")
        if not _is_int(self.block) or self.block < 1:
            raise InputError(f"the answer block must be an integer >= 1 (engine.batch_size), got {self.block!r}")

    @classmethod
    def from_selection(cls, selection: dict, block: int | None = None) -> "RacingConfig":
        """From the config's selection block (mode must be racing; unknown keys are errors) and the
        engine's answer block (answer_blocks.block_size; None, one block, rounds checkpoints to 1)."""
        unknown = sorted(set(selection) - set(DEFAULTS))
        if unknown:
            raise InputError(f"selection has unknown keys {unknown}; the known ones are {sorted(DEFAULTS)}")
        mode = selection.get("mode", DEFAULTS["mode"])
        if mode != "racing":
            raise InputError(f"selection.mode is {mode!r}: racing knobs apply only with mode: racing")
        return cls(**{k: v for k, v in selection.items() if k != "mode"}, block=int(block or 1))


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def checkpoints(n_problems: int, config: RacingConfig) -> list[int]:
    """Problems seen per racing member after each round: first_slice, *growth, ..., n_problems, each
    rounded up to whole answer blocks (config.block)."""
    if not _is_int(n_problems) or n_problems < 1:
        raise InputError(f"racing needs at least one train problem, got n_problems={n_problems!r}")
    marks, m = [], float(config.first_slice)
    while round(m) < n_problems:
        mark = -(-int(round(m)) // config.block) * config.block
        if mark < n_problems and (not marks or mark > marks[-1]):
            marks.append(mark)
        m *= config.growth
    # A last slice under half the previous one buys little and costs a round (a wave of jobs):
    # fold it into the previous round.
    if len(marks) >= 2 and n_problems - marks[-1] < (marks[-1] - marks[-2]) / 2:
        marks.pop()
    return marks + [n_problems]


def plan_rounds(n_problems: int, config: RacingConfig) -> list[np.ndarray]:
    """The problem indices each round adds: disjoint slices of a seeded permutation of 0..n-1.

    The slices together hold every problem exactly once. The order is random (seeded by
    config.order_seed) because both rules treat the problems seen so far as a random sample.
    """
    order = problem_order(n_problems, config.order_seed)
    marks = [0] + checkpoints(n_problems, config)
    return [np.sort(order[a:b]) for a, b in zip(marks[:-1], marks[1:])]


def decision_rounds(n_problems: int, config: RacingConfig) -> int:
    """R: the rounds after which members may stop (all but the last)."""
    return max(1, len(checkpoints(n_problems, config)) - 1)




@dataclass(frozen=True)
class RacePlan:
    """The whole race, decided when the DAG is built: the knobs, the split, k of the largest top-k
    list, and how a round's members are split over its race_slice jobs (population.shard_size members
    a job at most, over at least `parallel` jobs: one per GPU group, so no GPU idles while another
    races). rules/common.smk makes it once and passes it to every racing job as JSON."""
    config: RacingConfig
    n_problems: int
    population: Population
    # The engine's answer block (randopt/scoring/answer_blocks.py block_size): None is one block.
    answer_block: int | None = None
    parallel: int = 1
    checkpoints: tuple[int, ...] = field(init=False)

    def __post_init__(self):
        if not _is_int(self.parallel) or self.parallel < 1:
            raise InputError(f"racing jobs side by side must be an integer >= 1, got {self.parallel!r}")
        if self.config.block != (self.answer_block or 1):
            raise InputError(f"the racing knobs' block {self.config.block} is not the answer block {self.answer_block}")
        object.__setattr__(self, "checkpoints", tuple(checkpoints(self.n_problems, self.config)))

    @classmethod
    def from_config(cls, config: dict, parallel: int = 1) -> "RacePlan":
        """From a validated config (selection.mode racing); the answer block is the engine's."""
        block = block_size(config["engine"])
        return cls(RacingConfig.from_selection(config["selection"], block), int(_split_block(config)["n_train"]),
                   Population.from_config(config), block, parallel)

    @property
    def rounds(self) -> int:
        return len(self.checkpoints)

    @property
    def k(self) -> int:
        """k of the largest top-k list: racing protects it, every smaller list lies inside it."""
        return self.population.largest_k

    @property
    def chunks(self) -> int:
        """race_slice jobs per round (a job whose share is empty writes an empty table)."""
        return max(math.ceil(self.population.size / self.population.shard_size), self.parallel)

    def slices(self) -> list[np.ndarray]:
        return plan_rounds(self.n_problems, self.config)

    def to_json(self) -> str:
        return json.dumps({"config": asdict(self.config), "n_problems": self.n_problems,
                           "population": asdict(self.population), "answer_block": self.answer_block,
                           "parallel": self.parallel}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "RacePlan":
        try:
            data = json.loads(text)
            population = data["population"]
            return cls(RacingConfig(**data["config"]), int(data["n_problems"]),
                       Population(population["n_seeds"], tuple(population["sigmas"]), population["shard_size"],
                                  tuple(population["fractions"])), data["answer_block"], int(data["parallel"]))
        except (json.JSONDecodeError, KeyError, TypeError) as err:
            raise InputError(f"no racing plan (rules/common.smk writes it): {err!r}") from None


def _split_block(config: dict) -> dict:
    """The block with the run's n_train, task.<kind> (as randopt/config.py's problems_block, which this module
    does not import: the config's checks are no racing code)."""
    return config["task"][task_kind(config)]
