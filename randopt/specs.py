"""One spec a knob: the engine and perturbation knobs of a validated config as small typed values, each field
saying whether it changes answers. (Every decode knob changes answers: the keys take the decode block whole,
with the task's prompt, randopt/config.py decode_for; randopt/scoring/scorer.py DecodeSpec is its typed form
in the jobs.)

A field that changes answers enters the keys it changes (randopt/keys.py takes exactly those fields); every
other field only says how fast or where the engine runs, and reaches the engine as an option or a flag, never
a key. A field's name is the schema's name of its knob (its `source`), so a knob reads the same from
config/schema.yaml to the engine's options. tests/test_specs.py derives its checks from these fields: every
answer-changing knob moves its keys, no other knob does, and every knob of these blocks has a field.

Some knobs enter a key only away from their schema default: the keys of runs made before the knob existed
stay what they were (the default is read from the schema, the one source of defaults).
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from randopt.engines import compute_dtype
from randopt.schema import load_schema
from randopt.scoring import answer_blocks

EVAL, BPB = "eval", "bpb"
TORCH, VLLM = "torch", "vllm"


def knob(source: str, *, answers: bool, keys: tuple[str, ...] = (EVAL, BPB), keyed_when: str = "always",
         engines: tuple[str, ...] = (), passed_when: str = "always", generating_only: bool = False):
    """A spec field's rules. source: the knob's schema path. answers: whether it changes answers; then keys:
    which keys hold it, and keyed_when when: "always", "away" (only away from its schema default), "set" (only
    where it has a value) or "with <field>" (where that field is keyed). engines: the engine kinds that get it as an engine option, and
    passed_when when (the same rules); generating_only: not to an engine that only scores text."""
    return field(metadata={"source": source, "answers": answers, "keys": keys if answers else (),
                           "keyed_when": keyed_when, "engines": engines, "passed_when": passed_when,
                           "generating_only": generating_only})


def schema_default(source: str):
    """The schema's default of the knob at a dotted path (engine.batch_size)."""
    node = load_schema()
    for part in source.split("."):
        node = node["properties"][part]
    return node["default"]


def config_value(config: dict, source: str):
    """The knob's value in a config, or its schema default where the config has none (a record written before
    the knob existed)."""
    node = config
    for part in source.split("."):
        if not isinstance(node, dict) or part not in node:
            return schema_default(source)
        node = node[part]
    return node


class Spec:
    """What the specs share: fields built from their sources, the keys' and the engine's share of them."""

    @classmethod
    def knobs(cls):
        return fields(cls)

    @classmethod
    def from_config(cls, config: dict, **resolved) -> "Spec":
        """The spec of a validated config (a record's config too); resolved: fields whose value is decided
        elsewhere than the config (a compute dtype resolved on the host that plans the run)."""
        return cls(**{f.name: resolved[f.name] if f.name in resolved else config_value(config, f.metadata["source"])
                      for f in fields(cls)})

    def _holds(self, f, rule_name: str) -> bool:
        rule = f.metadata[rule_name]
        if rule == "always":
            return True
        if rule == "away":
            return getattr(self, f.name) != schema_default(f.metadata["source"])
        if rule == "set":
            return getattr(self, f.name) is not None
        other = rule.removeprefix("with ")
        return self._holds(next(g for g in fields(self) if g.name == other), rule_name)

    def keyed(self, f) -> bool:
        return self._holds(f, "keyed_when")

    def key(self, key: str) -> dict:
        """The fields that change the answers `key` (eval, bpb) hangs on, by their names."""
        return {f.name: getattr(self, f.name) for f in fields(self) if key in f.metadata["keys"] and self.keyed(f)}

    def options(self, engine: str, generating: bool = True) -> dict:
        """The fields the engine `engine` is built with (--engine-options-file of the stage CLIs)."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if engine in f.metadata["engines"] and (generating or not f.metadata["generating_only"])
                and self._holds(f, "passed_when")}


@dataclass(frozen=True)
class EngineSpec(Spec):
    """The engine block (and model.trust_remote_code, which the engine is built with). The fields' order is the
    options' order on the command line: the default's rule params stay as they were, so nothing reruns."""
    kind: str = knob("engine.kind", answers=True)
    device: str = knob("engine.device", answers=True, engines=(TORCH, VLLM))
    batch_size: int = knob("engine.batch_size", answers=True, engines=(TORCH, VLLM))
    tensor_parallel_size: int = knob("engine.tensor_parallel_size", answers=True, engines=(VLLM,))
    gpu_memory_utilization: Any = knob("engine.gpu_memory_utilization", answers=False, engines=(VLLM,))
    trust_remote_code: bool = knob("model.trust_remote_code", answers=False, engines=(TORCH, VLLM))
    # resolved where the run is planned (auto differs between CPUs): the dtype the jobs compute in is keyed
    compute_dtype: str = knob("engine.compute_dtype", answers=True, engines=(TORCH,))
    worker_process: bool = knob("engine.worker_process", answers=False, engines=(VLLM,), passed_when="away")
    # The torch engine answers in fixed blocks of a seeded problem order (randopt/scoring/answer_blocks.py): the
    # order's seed decides which problems share a batch, and so the answers; keyed under its schema name,
    # and only there (None: vLLM, which answers a member's problems in one block: answer_blocks.py says why).
    order_seed: int | None = knob("selection.order_seed", answers=True, keyed_when="set")
    # Speculation's verification runs other kernels than plain decode steps, so a near-tie may resolve otherwise;
    # bpb's engine generates nothing and is built without it.
    speculation: str = knob("engine.speculation", answers=True, keys=(EVAL,), keyed_when="away", engines=(VLLM,),
                            passed_when="away", generating_only=True)
    draft_tokens: int = knob("engine.draft_tokens", answers=True, keys=(EVAL,), keyed_when="with speculation",
                             engines=(VLLM,), passed_when="with speculation", generating_only=True)
    # A bmm over members may round otherwise than one member's matmul at a near-tie (evaluate_shard's
    # --member-batch, rules/search.smk).
    member_batch: int = knob("engine.member_batch", answers=True, keys=(EVAL,), keyed_when="away")
    # A compiled step's kernels may round a near-tie otherwise than eager's.
    torch_decode: str = knob("engine.torch_decode", answers=True, keys=(EVAL,), keyed_when="away", engines=(TORCH,),
                             passed_when="away")
    # vLLM's batch-invariant kernels round otherwise than its default ones, so answers and log-probs move; keyed and
    # passed only when on, so the default's keys and arguments stay what they were.
    batch_invariant: bool = knob("engine.batch_invariant", answers=True, keyed_when="away", engines=(VLLM,),
                                 passed_when="away")
    # Where the engines run: the plan lays them out (randopt/plan/engines.py) and passes flags, never options.
    engines_per_gpu: Any = knob("engine.engines_per_gpu", answers=False)
    cuda_mps: Any = knob("engine.cuda_mps", answers=False)
    keep_loaded_s: float = knob("engine.keep_loaded_s", answers=False)

    @classmethod
    def from_config(cls, config: dict, compute_dtype_resolved: str | None = None) -> "EngineSpec":
        """compute_dtype_resolved: the dtype auto resolved to (by default on this host)."""
        e = config["engine"]
        dtype = compute_dtype_resolved or compute_dtype.for_config(config)[0]
        order = config_value(config, "selection.order_seed") if answer_blocks.block_size(e) is not None else None
        return super().from_config(config, compute_dtype=dtype, order_seed=order)


@dataclass(frozen=True)
class PerturbationSpec(Spec):
    """How a seed's weights are made: both change the weights a seed gets, so its answers and its bpb."""
    noise: str = knob("perturbation.noise", answers=True, keyed_when="away", engines=(TORCH, VLLM), passed_when="away")
    # delta's drift: vLLM keeps its base copy and is refused delta (randopt/config.py), so only torch gets it
    switch: str = knob("perturbation.switch", answers=True, keyed_when="away", engines=(TORCH,), passed_when="away")


SPECS: tuple[type[Spec], ...] = (EngineSpec, PerturbationSpec)


@dataclass(frozen=True)
class Specs:
    """A run's specs, built once from its validated config."""
    engine: EngineSpec
    perturbation: PerturbationSpec

    @classmethod
    def from_config(cls, config: dict, compute_dtype_resolved: str | None = None) -> "Specs":
        return cls(EngineSpec.from_config(config, compute_dtype_resolved), PerturbationSpec.from_config(config))

    def engine_key(self, key: str) -> dict:
        """What of the engine and the perturbation changes the numbers `key` (eval, bpb) hangs on."""
        return self.engine.key(key) | self.perturbation.key(key)

    def engine_options(self, generating: bool = True) -> dict:
        """--engine-options-file of the stage CLIs: what the run's engine is built with."""
        kind = self.engine.kind
        return self.engine.options(kind, generating) | self.perturbation.options(kind, generating)
