"""The validated config as typed, read-only blocks: `blocks.model.path`, `blocks.heldout.sha256`, one class a
block, made from config/schema.yaml's own properties (the one source of every key's name and default), so
a block has exactly the schema's keys and a misspelt one is an AttributeError at DAG build, not a KeyError
inside a job. The plan builds them once (RunPlan.blocks); the rules read the config only through them.

An object-typed key with properties of its own (a source block, engine.cuda_mps' objects) is a block too;
free-form values (lists, a dict without properties, oneOf) stay as the config holds them, copied so that no
reader can change the plan's config through them.
"""
from __future__ import annotations

import copy
import functools
from dataclasses import make_dataclass
from types import MappingProxyType

from randopt.schema import load_schema


def _resolve(schema: dict, node: dict) -> dict:
    """A property's schema with its $ref followed (the definitions hold the task and source blocks)."""
    while "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        node = {**schema["definitions"][name], **{k: v for k, v in node.items() if k != "$ref"}}
    return node


@functools.lru_cache(maxsize=None)
def _block_class(path: str):
    """The frozen class of the block at a dotted schema path ("" for the whole config)."""
    schema = load_schema()
    node = schema
    for part in filter(None, path.split(".")):
        node = _resolve(schema, node["properties"][part])
    name = "".join(p.title() for p in path.replace("_", ".").split(".")) + "Block" if path else "ConfigBlocks"
    return make_dataclass(name, [(key, object) for key in node["properties"]], frozen=True)


def _is_block(schema: dict, node: dict) -> bool:
    node = _resolve(schema, node)
    return node.get("type") == "object" and "properties" in node


def build(config: dict, path: str = "", schema: dict | None = None):
    """The typed blocks of a validated config (defaults filled)."""
    schema = schema or load_schema()
    node = schema
    for part in filter(None, path.split(".")):
        node = _resolve(schema, node["properties"][part])
    values = {}
    for key, sub in node["properties"].items():
        value = config.get(key)
        child = f"{path}.{key}" if path else key
        if isinstance(value, dict) and _is_block(schema, sub):
            values[key] = build(value, child, schema)
        elif isinstance(value, dict):
            values[key] = MappingProxyType(copy.deepcopy(value))
        else:
            values[key] = copy.deepcopy(value)
    return _block_class(path)(**values)
