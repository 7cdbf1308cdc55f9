"""Config validation: JSON schema (config/schema.yaml) with defaults filled in, then the checks a
schema cannot express. Every error names the key and says what to do."""
from __future__ import annotations

import copy
import re
from pathlib import Path

import jsonschema
import yaml

from randopt.engines import compute_dtype

SCHEMA_PATH = Path(__file__).resolve().parents[1] / "config" / "schema.yaml"


class ConfigError(ValueError):
    pass


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


def load_schema() -> dict:
    return yaml.safe_load(SCHEMA_PATH.read_text())


def load_yaml(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: config file not found")
    data = yaml.safe_load(path.read_text())  # safe_load: a config can never construct objects
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a config must be a YAML mapping, got {type(data).__name__}")
    return data


def population_size(config: dict) -> int:
    return config["population"]["n_seeds"] * len(config["population"]["sigmas"])


def topk_size(fraction: float, population: int) -> int:
    """k members for a fraction: round(fraction * population), at least one."""
    return int(round(fraction * population))


def validate(config: dict) -> dict:
    """Return a validated copy with defaults filled; raise ConfigError naming the offending key."""
    config = copy.deepcopy(config)
    validator = _with_defaults(jsonschema.Draft7Validator)(load_schema())
    errors = sorted(validator.iter_errors(config), key=lambda e: list(e.absolute_path))
    if errors:
        err = errors[0]
        key = ".".join(str(p) for p in err.absolute_path) or "(top level)"
        raise ConfigError(f"config key '{key}': {err.message}")
    population = population_size(config)
    for fraction in config["topk"]["fractions"]:
        if topk_size(fraction, population) < 1:
            raise ConfigError(
                f"config key 'topk.fractions': fraction {fraction} of a population of {population} "
                f"(population.n_seeds x len(population.sigmas)) keeps no member; raise population.n_seeds "
                f"or the fraction")
    for section in ("gsm8k", "heldout"):
        kind = config[section]["source"]
        for key, value in config[section][kind].items():
            if value is None and key in ("path", "revision"):
                raise ConfigError(f"config key '{section}.{kind}.{key}': {section}.source is '{kind}' but no "
                                  f"{key} is given")
        if kind == "hub":
            check_commit(f"{section}.hub.revision", config[section]["hub"]["revision"])
    try:
        compute_dtype.for_config(config)
    except ValueError as err:
        raise ConfigError(f"config key 'engine.compute_dtype': {err}") from None
    model = config["model"]
    if model["source"] == "local" and not model["path"]:
        raise ConfigError("config key 'model.path': model.source is 'local' but no path is given")
    if model["source"] == "hub":
        if not model["revision"]:
            raise ConfigError("config key 'model.revision': a hub model needs a pinned revision (a commit hash)")
        check_commit("model.revision", model["revision"])
    return config


def check_commit(key: str, revision: str) -> None:
    """A hub revision must be a commit: a branch or tag moves, and the record would not say what ran.
    Checked here so that a run fails before any job is queued, not inside the first job."""
    if not re.fullmatch(r"[0-9a-f]{40}", str(revision)):
        raise ConfigError(f"config key '{key}': {revision!r} is not a commit; give the 40-hex commit sha "
                          f"(e.g. HfApi().model_info(repo).sha, or dataset_info for a dataset)")


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
