"""Config validation: JSON schema (config/schema.yaml, the one source of defaults and descriptions)
with defaults filled in, then the checks a schema cannot express. Every error names the key and says
what to do.

The schema's `definitions` (data sources, decode, engine options) are also what the stage CLIs check
their JSON arguments against (check_source, check_decode, check_engine_options), so a source block is
validated the same way in a config before any job runs and in a CLI run by hand.
"""
from __future__ import annotations

import copy
import functools
import json
import re
from pathlib import Path

import jsonschema
import yaml

from randopt.engines import compute_dtype
from randopt.io import InputError

SCHEMA_PATH = Path(__file__).resolve().parents[1] / "config" / "schema.yaml"

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


@functools.lru_cache(maxsize=1)
def _schema_text() -> str:
    return SCHEMA_PATH.read_text()


def load_schema() -> dict:
    return yaml.safe_load(_schema_text())


def load_yaml(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: config file not found")
    data = yaml.safe_load(path.read_text())  # safe_load: a config can never construct objects
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a config must be a YAML mapping, got {type(data).__name__}")
    return data


# randopt/racing.py's rule exact builds p-value tables that grow with the cube of the split.
EXACT_MAX_PROBLEMS = 1000


def effective_config(configfiles) -> dict:
    """The config a workflow run uses: config/config.yaml with each --configfile deep-merged over it in
    order (Snakemake's rule), validated. For tools that read a run without Snakemake (make status,
    bench/racing.py)."""
    from snakemake.utils import update_config
    config = load_yaml(SCHEMA_PATH.parent / "config.yaml")
    for path in configfiles:
        update_config(config, load_yaml(path))
    return validate(config)


def population_size(config: dict) -> int:
    return config["population"]["n_seeds"] * len(config["population"]["sigmas"])


def topk_size(fraction: float, population: int) -> int:
    """k members for a fraction: round(fraction * population), at least one."""
    return int(round(fraction * population))


def _error_message(err: jsonschema.ValidationError) -> str:
    """One line for a schema error: missing and unknown keys said plainly, the rest as jsonschema says."""
    if err.validator == "required":
        missing = sorted(set(err.validator_value) - set(err.instance))
        return f"missing key(s) {missing}"
    if err.validator == "additionalProperties":
        allowed = sorted(err.schema.get("properties", {}))
        unknown = sorted(set(err.instance) - set(allowed))
        return f"unknown key(s) {unknown}; allowed: {allowed}"
    return err.message


def _validate(instance, schema: dict, label) -> None:
    """Fill defaults into instance and validate it; label(path) names the key of the first error."""
    root = load_schema()
    validator = _with_defaults(jsonschema.Draft7Validator)(schema | {"definitions": root["definitions"]})
    errors = sorted(validator.iter_errors(instance), key=lambda e: [str(p) for p in e.absolute_path])
    if errors:
        err = errors[0]
        raise ConfigError(f"{label(list(err.absolute_path))}: {_error_message(err)}")


def validate(config: dict) -> dict:
    """Return a validated copy with defaults filled; raise ConfigError naming the offending key."""
    config = copy.deepcopy(config)

    def label(path):
        return f"config key '{'.'.join(map(str, path)) or '(top level)'}'"

    _validate(config, load_schema(), label)
    population = population_size(config)
    too_far = [r for r in config["export"]["ranks"] if r > population]
    if too_far:
        raise ConfigError(f"config key 'export.ranks': ranks {too_far} exceed the population of {population} "
                          "(population.n_seeds x len(population.sigmas)); export ranks 1 to that")
    for fraction in config["topk"]["fractions"]:
        if topk_size(fraction, population) < 1:
            raise ConfigError(
                f"config key 'topk.fractions': fraction {fraction} of a population of {population} "
                f"(population.n_seeds x len(population.sigmas)) keeps no member; raise population.n_seeds "
                f"or the fraction")
    _check_selection(config)
    for section in SOURCE_KINDS:
        kind = config[section]["source"]
        _check_selected(section, kind, config[section][kind], lambda key: f"config key '{section}.{kind}.{key}'")
    try:
        compute_dtype.for_config(config)
    except ValueError as err:
        raise ConfigError(f"config key 'engine.compute_dtype': {err}") from None
    if config["perturbation"]["switch"] == "delta" and config["engine"]["kind"] != "torch":
        raise ConfigError("config key 'perturbation.switch': delta is wired for engine.kind torch only (the vLLM "
                          "worker keeps a resident base copy); use switch: reconstruct with vLLM")
    model = config["model"]
    if model["source"] == "local" and not model["path"]:
        raise ConfigError("config key 'model.path': model.source is 'local' but no path is given")
    if model["source"] == "hub":
        if not model["revision"]:
            raise ConfigError("config key 'model.revision': a hub model needs a pinned revision (a commit hash)")
        check_commit("config key 'model.revision'", model["revision"])
    return config


def _check_selection(config: dict) -> None:
    """Racing's limits that the schema cannot say: rule exact's split size; at least k members race."""
    selection = config["selection"]
    if selection["mode"] != "racing":
        return
    n_train = config["gsm8k"]["n_train"]
    if selection["rule"] == "exact" and n_train > EXACT_MAX_PROBLEMS:
        raise ConfigError(f"config key 'selection.rule': exact supports up to {EXACT_MAX_PROBLEMS} train problems "
                          f"(gsm8k.n_train is {n_train}); use rule bayes, or a smaller gsm8k.n_train")


def _check_selected(section: str, kind: str, block: dict, name) -> None:
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
    _validate(block, {"$ref": f"#/definitions/{section}_{kind}"},
              lambda path: f"{label} of kind {kind!r}" + (f", key '{'.'.join(map(str, path))}'" if path else ""))
    _check_selected(section, kind, block, lambda key: f"{label} of kind {kind!r}, key '{key}'")
    return {"kind": kind, **block}


def check_decode(decode) -> dict:
    """--decode of evaluate_shard / evaluate_members: the config's decode block, defaults filled."""
    decode = copy.deepcopy(decode)
    _validate(decode, {"$ref": "#/definitions/decode"},
              lambda path: "--decode" + (f" key '{'.'.join(map(str, path))}'" if path else ""))
    return decode


def check_engine_options(options) -> dict:
    """--engine-options of the engine stages: only the keys an engine knows, each of its type."""
    options = copy.deepcopy(options)
    _validate(options, {"$ref": "#/definitions/engine_options"},
              lambda path: "--engine-options" + (f" key '{'.'.join(map(str, path))}'" if path else ""))
    return options


def check_commit(name: str, revision: str) -> None:
    """A hub revision must be a commit: a branch or tag moves, and the record would not say what ran.
    Checked here so that a run fails before any job is queued, not inside the first job."""
    if not re.fullmatch(r"[0-9a-f]{40}", str(revision)):
        raise ConfigError(f"{name}: {revision!r} is not a commit; give the 40-hex commit sha "
                          f"(e.g. HfApi().model_info(repo).sha, or dataset_info for a dataset)")


def check_model_files(config: dict) -> None:
    """The checks that need the file system, made when the DAG is built (before any job): a local model
    dir must exist, and under vLLM the tensor-parallel size must divide the model's attention heads
    (read from its config.json when the model dir is local; a hub or GGUF model is checked by the
    engine when it loads)."""
    model, engine = config["model"], config["engine"]
    if model["source"] != "local":
        return
    path = Path(model["path"])
    if not path.is_dir():
        raise ConfigError(f"config key 'model.path': {path} is not a directory; give a Hugging Face model dir "
                          f"(config.json and safetensors weights), as an absolute path or relative to the "
                          f"working directory")
    tp = engine["tensor_parallel_size"]
    if engine["kind"] != "vllm" or tp == 1:
        return
    heads = model_attention_heads(path)
    if heads is not None and heads % tp:
        divisors = [d for d in range(1, heads + 1) if heads % d == 0]
        raise ConfigError(f"config key 'engine.tensor_parallel_size': {tp} does not divide the {heads} attention "
                          f"heads of {path} (config.json num_attention_heads); use one of {divisors}")


def model_attention_heads(model_dir: Path) -> int | None:
    """num_attention_heads of a model dir's config.json (a multimodal config keeps it in text_config),
    or None when it does not say."""
    config_path = Path(model_dir) / "config.json"
    if not config_path.is_file():
        raise ConfigError(f"config key 'model.path': {model_dir} has no config.json; give a Hugging Face model dir")
    try:
        hf = json.loads(config_path.read_text())
    except json.JSONDecodeError as err:
        raise ConfigError(f"config key 'model.path': {config_path} is not valid JSON ({err})") from err
    for where in (hf, hf.get("text_config") or {}):
        heads = where.get("num_attention_heads")
        if isinstance(heads, int) and heads > 0:
            return heads
    return None


def gsm8k_source(config: dict) -> dict:
    """The selected GSM8K source as one dict: {"kind": ..., **its block}."""
    kind = config["gsm8k"]["source"]
    return {"kind": kind, **config["gsm8k"][kind]}


def heldout_source(config: dict) -> dict:
    kind = config["heldout"]["source"]
    return {"kind": kind, **config["heldout"][kind]}


def sigma_label(sigma: float) -> str:
    """The one spelling of a sigma in paths and tables: repr of the float (e.g. 0.001, 5e-05)."""
    return repr(float(sigma))
