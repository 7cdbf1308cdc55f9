"""The whole run's config, validated when the DAG is built: the schema (randopt/schema.py, defaults
filled in), then the checks a schema cannot express. Every error names the key and says what to do.

Only the workflow and the tools that read a run import this module; the stages check their own
arguments with randopt/schema.py, so editing these checks reruns no stage (randopt/code_keys.py).
"""
from __future__ import annotations

import copy
import json
from pathlib import Path

import yaml

from randopt.engines import compute_dtype
from randopt.population import population_size, topk_size
from randopt.schema import (SCHEMA_PATH, SOURCE_KINDS, ConfigError, check_commit, check_decode,  # noqa: F401
                            check_engine_options, check_selected, check_source, load_schema, validate_block)
from randopt.selection.rules import EXACT_MAX_PROBLEMS



def load_yaml(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: config file not found")
    data = yaml.safe_load(path.read_text())  # safe_load: a config can never construct objects
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a config must be a YAML mapping, got {type(data).__name__}")
    return data


def effective_config(configfiles) -> dict:
    """The config a workflow run uses: config/config.yaml with each --configfile deep-merged over it in
    order (Snakemake's rule), validated. For tools that read a run without Snakemake (make status,
    bench/racing/racing.py)."""
    from snakemake.utils import update_config
    config = load_yaml(SCHEMA_PATH.parent / "config.yaml")
    for path in configfiles:
        update_config(config, load_yaml(path))
    return validate(config)


def validate(config: dict) -> dict:
    """Return a validated copy with defaults filled; raise ConfigError naming the offending key."""
    config = copy.deepcopy(config)

    def label(path):
        return f"config key '{'.'.join(map(str, path)) or '(top level)'}'"

    validate_block(config, load_schema(), label)
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
        check_selected(section, kind, config[section][kind], lambda key: f"config key '{section}.{kind}.{key}'")
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


