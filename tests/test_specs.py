"""One spec a knob (randopt/specs.py): every check here is derived from the specs' fields and the schema, not
from a list of knobs of its own. A knob that changes answers moves exactly the keys its field names; a knob
that does not moves none; every knob of the engine and perturbation blocks has a field; and a knob keeps its
schema name on its way to the engine."""
from __future__ import annotations

import copy
from functools import lru_cache

import pytest

from randopt.config import ConfigError, validate
from randopt.keys import run_keys
from randopt.schema import load_schema, resolve_ref
from randopt.specs import BPB, EVAL, SPECS, Specs, schema_default

FIELDS = [f for spec in SPECS for f in spec.knobs()]
# The runs a knob is tried on: each knob matters under one of them at least (a vLLM knob under vLLM, draft_tokens
# with speculation on). A knob that changes answers under none of them fails its test.
BASES = ({}, {"engine": {"kind": "vllm", "device": "cuda"}},
         {"engine": {"kind": "vllm", "device": "cuda", "speculation": "population"}})


def schema_node(source: str) -> dict:
    schema, node = load_schema(), load_schema()
    for part in source.split("."):
        node = resolve_ref(node["properties"][part], schema)
    return node


def alternatives(source: str) -> list:
    """Values the schema allows for the knob other than its default, from its enum, consts and type."""
    node, default = schema_node(source), schema_default(source)
    values = list(node.get("enum", []))
    for option in node.get("oneOf", []):
        values += [option["const"]] if "const" in option else [2, 3] if option.get("type") == "integer" else \
            [0.5] if option.get("type") == "number" else [True, False] if option.get("type") == "boolean" else []
    types = node.get("type", [])
    types = [types] if isinstance(types, str) else types
    if "integer" in types or "number" in types:
        values += [default + 1, default + 3] if isinstance(default, (int, float)) else [2]
    if "boolean" in types:
        values += [not default]
    if "string" in types and not values:
        values += ["float32", "cpu"]
    return [v for v in values if v != default]


def with_value(config: dict, source: str, value) -> dict:
    config = copy.deepcopy(config)
    node = config
    *path, last = source.split(".")
    for part in path:
        node = node.setdefault(part, {})
    node[last] = value
    return config


@lru_cache(maxsize=None)
def keys_of(config_json: str) -> dict | None:
    """The eval and bpb keys of a config, or None where the config is refused (a knob of the other engine)."""
    import json
    try:
        keys = run_keys(validate(json.loads(config_json)), inputs={})
    except ConfigError:
        return None
    return {EVAL: keys[EVAL], BPB: keys[BPB]}


def moved(source: str):
    """(keys moved, base, value) for every valid change of the knob away from its default on every base run."""
    import json
    for base in BASES:
        before = keys_of(json.dumps(base, sort_keys=True))
        for value in alternatives(source):
            after = keys_of(json.dumps(with_value(base, source, value), sort_keys=True))
            if before is not None and after is not None:
                yield {k for k in (EVAL, BPB) if before[k] != after[k]}, base, value


@pytest.mark.parametrize("f", [f for f in FIELDS if f.metadata["answers"]], ids=lambda f: f.name)
def test_a_knob_that_changes_answers_moves_exactly_its_keys(f):
    changes = list(moved(f.metadata["source"]))
    assert changes, f"{f.metadata['source']}: no valid change on any base run to try"
    assert any(keys == set(f.metadata["keys"]) for keys, _, _ in changes), (
        f"{f.metadata['source']} changes answers but moves {[c[0] for c in changes]}, never {f.metadata['keys']}")
    for keys, base, value in changes:
        assert keys <= set(f.metadata["keys"]), f"{f.metadata['source']} {value!r} on {base} moves {keys}"


@pytest.mark.parametrize("f", [f for f in FIELDS if not f.metadata["answers"]], ids=lambda f: f.name)
def test_a_knob_that_changes_no_answer_moves_no_key(f):
    changes = list(moved(f.metadata["source"]))
    assert changes, f"{f.metadata['source']}: no valid change on any base run to try"
    for keys, base, value in changes:
        assert not keys, f"{f.metadata['source']} {value!r} on {base} moves {keys}, but its spec says it changes no answer"


@pytest.mark.parametrize("block", ["engine", "perturbation"])
def test_every_knob_of_a_block_has_a_spec_field(block):
    """A knob added to the schema without a field would be in no key and reach no engine: classify it."""
    sources = {f.metadata["source"] for f in FIELDS}
    missing = {f"{block}.{name}" for name in load_schema()["properties"][block]["properties"]} - sources
    assert not missing, f"{sorted(missing)}: give each a field in randopt/specs.py that says whether it changes answers"


def test_a_knob_reaches_the_engine_by_its_schema_name():
    """The engine's options are the schema's knob names, and the stage CLIs accept each of them."""
    options = load_schema()["definitions"]["engine_options"]["properties"]
    for f in FIELDS:
        if f.metadata["engines"]:
            assert f.name == f.metadata["source"].rsplit(".", 1)[1] and f.name in options, f.name


def test_the_default_passes_its_engine_only_what_it_always_did():
    """Knobs passed only away from their defaults leave the default's --engine-options-file (rules' params) as they
    were; the compute dtype is the one resolved where the run is planned."""
    specs = Specs.from_config(validate({}), compute_dtype_resolved="float32")
    assert specs.engine_options() == {"device": "auto", "batch_size": 32, "trust_remote_code": False,
                                      "compute_dtype": "float32"}
    vllm = Specs.from_config(validate({"engine": {"kind": "vllm", "device": "cuda", "speculation": "population"}}))
    assert vllm.engine_options() == {"device": "cuda", "batch_size": 32, "tensor_parallel_size": 1,
                                     "gpu_memory_utilization": "auto", "trust_remote_code": False,
                                     "speculation": "population", "draft_tokens": 8}
    assert "speculation" not in vllm.engine_options(generating=False)   # score_bpb scores given text
