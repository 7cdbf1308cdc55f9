"""The config schema (config/schema.yaml), the one source of defaults and descriptions: loading it,
and checking one block against it with defaults filled in.

Its `definitions` (data sources, decode, engine options) are what the stage CLIs check their JSON
arguments against (check_source, check_decode, check_engine_options), so a source block is validated
the same way in a config before any job runs (randopt/config.py) and in a CLI run by hand.
"""
from __future__ import annotations

import copy
import difflib
import functools
import json
import re

import jsonschema
import yaml

from randopt.checkout import WORKFLOW
from randopt.io import InputError

SCHEMA_PATH = WORKFLOW / "config" / "schema.yaml"

# The source kinds of each data section, and the definition that types each kind's block.
SOURCE_KINDS = {"gsm8k": ("generated", "jsonl", "hub"), "heldout": ("synthetic", "jsonl", "parquet", "hub")}
# Source keys that may be null in a block the config does not select, but never in the selected one.
_SOURCE_REQUIRED = ("path", "revision")
class ConfigError(InputError):
    """A bad config key or a bad JSON argument of a stage CLI (an InputError: the CLI exits 2)."""


def _with_defaults(validator_class):
    """The jsonschema recipe: fill each property's default before validating it."""
    validate_properties = validator_class.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for prop, sub in properties.items():
                if "default" in sub and prop not in instance:
                    instance[prop] = copy.deepcopy(sub["default"])
        yield from validate_properties(validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_class, {"properties": set_defaults})


# libyaml's loader where PyYAML has it (the same safe subset, ~5x faster than the pure-Python one).
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@functools.lru_cache(maxsize=1)
def _parsed_schema() -> dict:
    """The schema parsed once a process: a Snakemake start validated the config against it three
    times, each a parse of ~700 lines, and so did each stage that checks a block."""
    return yaml.load(SCHEMA_PATH.read_text(), Loader=_SAFE_LOADER)


def load_schema() -> dict:
    """A fresh copy of the schema: callers may fill defaults into what they get."""
    return copy.deepcopy(_parsed_schema())


def _error_message(err: jsonschema.ValidationError) -> str:
    """One line for a schema error that says what the key must be and what it got (a fix, not
    jsonschema's "0 is less than the minimum of 1"); unknown keys and names offer the nearest allowed one."""
    got, rule = err.instance, err.validator_value
    bounds = {"minimum": ">=", "exclusiveMinimum": ">", "maximum": "<=", "exclusiveMaximum": "<"}
    if err.validator in bounds:
        return f"must be {bounds[err.validator]} {_show(rule)} (got {_show(got)})"
    if err.validator == "enum":
        return f"must be one of {', '.join(map(_show, rule))} (got {_show(got)}{_did_you_mean(got, rule)})"
    if err.validator == "const":
        return f"must be {_show(rule)} (got {_show(got)})"
    if err.validator == "type":
        return f"must be {_describe({'type': rule})} (got {_show(got)}, {_describe({'type': _json_type(got)})})"
    if err.validator == "pattern":
        return f"must match the pattern {rule} (got {_show(got)})"
    if err.validator in ("minItems", "maxItems", "minLength", "maxLength"):
        least, unit = err.validator.startswith("min"), "item(s)" if err.validator.endswith("Items") else "character(s)"
        return f"must have at {'least' if least else 'most'} {rule} {unit} (got {_show(got)})"
    if err.validator == "uniqueItems":
        return f"must not repeat an item (got {_show(got)})"
    if err.validator == "required":
        missing = sorted(set(rule) - set(got))
        return f"missing key(s) {missing}; add them to this block"
    if err.validator == "additionalProperties":
        allowed = sorted(err.schema.get("properties", {}))
        unknown = sorted(set(got) - set(allowed))
        guesses = {key: near[0] for key in unknown if (near := difflib.get_close_matches(key, allowed, 1))}
        if guesses:
            near = [repr(guesses[unknown[0]])] if len(unknown) == 1 else [f"{v!r} for {k!r}" for k, v in guesses.items()]
            return f"unknown key(s) {unknown}; did you mean {', '.join(near)}? allowed: {allowed}"
        return f"unknown key(s) {unknown}; allowed: {allowed}"
    if err.validator in ("oneOf", "anyOf"):
        inner = _alternative_error(err)
        if inner is not None:
            where = ".".join(map(str, inner.relative_path))
            return (f"key '{where}': " if where else "") + _error_message(inner)
        return f"must be {' or '.join(_describe(s) for s in rule)} (got {_show(got)})"
    return err.message


def _alternative_error(err: jsonschema.ValidationError) -> jsonschema.ValidationError | None:
    """Of a oneOf error, the error inside the alternative of the value's own type (a mapping with a bad key,
    a number out of bounds), or None when the value has none of the alternatives' types."""
    deeper = [e for e in err.context if e.relative_path or e.validator not in ("type", "const", "enum")]
    return jsonschema.exceptions.best_match(deeper) if deeper else None


def _show(value) -> str:
    """A value as a config would write it (JSON is YAML's flow style): "auto", null, true, [0.002, 0.004]."""
    return json.dumps(value)


def _json_type(value) -> str:
    """The schema type name of a config value, for "(got ..., a string)"."""
    kinds = ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"), (list, "array"), (dict, "object"))
    return next((name for kind, name in kinds if isinstance(value, kind)), "null")


def _did_you_mean(got, allowed) -> str:
    """"; did you mean X?" for a string close to one of the allowed strings (a typo), else ""."""
    names = [a for a in allowed if isinstance(a, str)]
    near = difflib.get_close_matches(got, names, 1) if isinstance(got, str) else []
    return f"; did you mean {_show(near[0])}?" if near else ""


def _describe(schema: dict) -> str:
    """A oneOf alternative in words (e.g. "an integer >= 1", '"auto"'), for an error message."""
    if "const" in schema:
        return _show(schema["const"])
    if "enum" in schema:
        return "one of " + ", ".join(map(_show, schema["enum"]))
    words = {"integer": "an integer", "number": "a number", "string": "a string", "boolean": "true or false",
             "null": "null", "array": "a list", "object": "a mapping"}
    kinds = schema.get("type", "value")
    text = " or ".join(words.get(k, k) for k in ([kinds] if isinstance(kinds, str) else kinds))
    bounds = [(">=", "minimum"), (">", "exclusiveMinimum"), ("<=", "maximum"), ("<", "exclusiveMaximum")]
    return " ".join([text] + [f"{op} {schema[key]}" for op, key in bounds if key in schema])


# Errors about a key's own value, after which its schema default is a fix worth naming (not a missing or
# unknown key inside a mapping, whose default is the whole block).
_VALUE_ERRORS = ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum", "enum", "const", "type", "pattern",
                 "minItems", "maxItems", "minLength", "maxLength", "uniqueItems", "oneOf", "anyOf")


def _default_hint(err: jsonschema.ValidationError, schema: dict) -> str:
    """"; the default is X" when the failing key has a default in the schema (validate_block's), else ""."""
    if err.validator not in _VALUE_ERRORS:
        return ""
    if err.validator in ("oneOf", "anyOf") and (inner := _alternative_error(err)) is not None and inner.relative_path:
        return ""  # the message is about a key inside the value, which the outer default does not fix
    sub = schema
    for part in err.absolute_path:
        sub = resolve_ref(sub, schema)
        sub = sub.get("items") if isinstance(part, int) else sub.get("properties", {}).get(part)
        if not isinstance(sub, dict):
            return ""
    # a default may sit beside a $ref (the config's blocks reference definitions) or inside its target
    for where in (sub, resolve_ref(sub, schema)):
        if "default" in where:
            return f"; the default is {_show(where['default'])}"
    return ""


def resolve_ref(sub: dict, schema: dict) -> dict:
    """sub with its $ref (into schema's definitions) followed; the keys beside the $ref win (the config puts
    a key's default beside the $ref to its type)."""
    while "$ref" in sub:
        target = schema
        for part in sub["$ref"].lstrip("#/").split("/"):
            target = target[part]
        sub = {**target, **{k: v for k, v in sub.items() if k != "$ref"}}
    return sub


def validate_block(instance, schema: dict, label) -> None:
    """Fill defaults into instance and validate it; label(path) names the key of the first error."""
    root = load_schema()
    schema = schema | {"definitions": root["definitions"]}
    validator = _with_defaults(jsonschema.Draft7Validator)(schema)
    errors = sorted(validator.iter_errors(instance), key=lambda e: [str(p) for p in e.absolute_path])
    if errors:
        err = errors[0]
        raise ConfigError(f"{label(list(err.absolute_path))}: {_error_message(err)}{_default_hint(err, schema)}")


def check_selected(section: str, kind: str, block: dict, name) -> None:
    """What only the selected source block must satisfy: a path or revision given, a commit pinned."""
    for key in _SOURCE_REQUIRED:
        if key in block and block[key] is None:
            raise ConfigError(f"{name(key)}: {section}.source is '{kind}' but no {key} is given")
    if kind == "hub":
        check_commit(name("revision"), block["revision"])


def check_source(section: str, source) -> dict:
    """A data source as a stage receives it, {"kind": ..., **its block}: checked against the schema's
    definition of that kind (the same one the config's block is checked against), defaults filled.
    Returns the filled source; raises ConfigError (a ValueError: the CLI exits 2) naming the key."""
    label = {"gsm8k": "GSM8K source", "heldout": "held-out source"}[section]
    if not isinstance(source, dict):
        raise ConfigError(f"{label} must be a JSON object with a 'kind', got {source!r}")
    kind = source.get("kind")
    if kind not in SOURCE_KINDS[section]:
        raise ConfigError(f"{label}: unknown kind {kind!r}; use one of {list(SOURCE_KINDS[section])}")
    block = {k: v for k, v in source.items() if k != "kind"}
    validate_block(block, {"$ref": f"#/definitions/{section}_{kind}"},
              lambda path: f"{label} of kind {kind!r}" + (f", key '{'.'.join(map(str, path))}'" if path else ""))
    check_selected(section, kind, block, lambda key: f"{label} of kind {kind!r}, key '{key}'")
    return {"kind": kind, **block}


def check_decode(decode) -> dict:
    """--decode-file of evaluate_shard / evaluate_members: the config's decode block, defaults filled."""
    decode = copy.deepcopy(decode)
    validate_block(decode, {"$ref": "#/definitions/decode"},
              lambda path: "--decode-file" + (f" key '{'.'.join(map(str, path))}'" if path else ""))
    return decode


def check_engine_options(options) -> dict:
    """--engine-options-file of the engine stages: only the keys an engine knows, each of its type."""
    options = copy.deepcopy(options)
    validate_block(options, {"$ref": "#/definitions/engine_options"},
              lambda path: "--engine-options-file" + (f" key '{'.'.join(map(str, path))}'" if path else ""))
    return options


def check_sha256(value: str | None, what: str) -> None:
    """A pin (a frozen split's, the held-out slice's): None (nothing pinned), or 64 hex digits; anything else is
    an error naming ``what``, before anything is read or written."""
    if value is not None and (not isinstance(value, str) or not re.fullmatch(r"[0-9a-fA-F]{64}", value)):
        raise ConfigError(f"{what} {value!r} is not a sha256 (64 hex digits)")


def check_commit(name: str, revision: str) -> None:
    """A hub revision must be a commit: a branch or tag moves, and the record would not say what ran.
    Checked here so that a run fails before any job is queued, not inside the first job."""
    if not re.fullmatch(r"[0-9a-f]{40}", str(revision)):
        raise ConfigError(f"{name}: {revision!r} is not a commit; give the 40-hex commit sha "
                          f"(e.g. HfApi().model_info(repo).sha, or dataset_info for a dataset)")


# The prompt keys every task's block holds (task.<kind>), which the engine stages get inside --decode-file.
TASK_PROMPT_KEYS = ("system", "examples", "stop")


def decode_for(config: dict) -> dict:
    """The decode block the engine stages get (and the record holds): the validated config's, with the task's
    prompt (system line, examples, stop strings)."""
    kind = task_kind(config)
    return config["decode"] | {key: config["task"][kind][key] for key in TASK_PROMPT_KEYS}


def task_kind(config: dict) -> str:
    """A config's task kind: task.kind, or the schema's default where it names none (a config before its
    defaults are filled, or an old record's, written before tasks existed). The one place that default is read."""
    task = config.get("task")
    kind = task.get("kind") if isinstance(task, dict) else None
    return kind if kind is not None else _parsed_schema()["properties"]["task"]["properties"]["kind"]["default"]
