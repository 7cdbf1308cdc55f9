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
    _check_task_keys(config)
    resolve_prompt_style(config)

    def label(path):
        return f"config key '{'.'.join(map(str, path)) or '(top level)'}'"

    validate_block(config, load_schema(), label)
    population = population_size(config)
    too_far = [r for r in config["export"]["ranks"] if r > population]
    if too_far:
        raise ConfigError(f"config key 'export.ranks': ranks {too_far} exceed the population of {population} "
                          "(population.n_seeds x len(population.sigmas)); export ranks 1 to that")
    # a shape model's answers are no result (randopt/model/shape.py): only the record says so, so the stages
    # whose own tables report accuracies (lm-eval's, distillation's comparison) are refused for it
    for key, on in (("lm_eval.tasks", config["lm_eval"]["tasks"]), ("distill.enabled", config["distill"]["enabled"])):
        if config["model"]["source"] == "shape" and on:
            raise ConfigError(f"config key '{key}': model.source is 'shape' (random weights, for timing), whose "
                              f"accuracies are no result; turn {key} off, or use a model with real weights")
    # lm_eval.ensembles only matter when lm_eval has tasks: the rule runs nothing otherwise, and a
    # small population (tests, a tiny run) must not fail on the block's default fraction.
    checked = [("topk.fractions", config["topk"]["fractions"])]
    if config["lm_eval"]["tasks"]:
        checked.append(("lm_eval.ensembles", config["lm_eval"]["ensembles"]))
    for key, fractions in checked:
        for fraction in fractions:
            if topk_size(fraction, population) < 1:
                raise ConfigError(
                    f"config key '{key}': fraction {fraction} of a population of {population} "
                    f"(population.n_seeds x len(population.sigmas)) keeps no member; raise population.n_seeds "
                    f"or the fraction")
    _check_selection(config)
    _check_speculation(config["engine"])
    _check_member_batch(config)
    _check_distill(config)
    for section in SOURCE_KINDS:
        kind = config[section]["source"]
        check_selected(section, kind, config[section][kind], lambda key: f"config key '{section}.{kind}.{key}'")
    _check_task(config)
    try:
        compute_dtype.for_config(config)
    except ValueError as err:
        raise ConfigError(f"config key 'engine.compute_dtype': {err}") from None
    if config["engine"]["worker_process"] and config["engine"]["kind"] != "vllm":
        raise ConfigError("config key 'engine.worker_process': a worker process of its own is vLLM's layout "
                          "(engine.kind vllm); the torch engine runs in its job's process: set it to false")
    if config["engine"]["torch_decode"] != "eager" and config["engine"]["kind"] != "torch":
        raise ConfigError(f"config key 'engine.torch_decode': {config['engine']['torch_decode']} is the torch engine's "
                          "decode (a transformers StaticCache, compiled on CUDA); vLLM captures its own CUDA graphs: "
                          "use torch_decode: eager with engine.kind vllm, or engine.kind torch")
    if config["perturbation"]["switch"] == "delta" and config["engine"]["kind"] != "torch":
        raise ConfigError("config key 'perturbation.switch': delta is wired for engine.kind torch only (the vLLM "
                          "worker keeps a resident base copy); use switch: reconstruct with vLLM")
    model = config["model"]
    if model["source"] == "local" and not model["path"]:
        raise ConfigError("config key 'model.path': model.source is 'local' but no path is given")
    if model["source"] == "shape" and not model["config"]:
        raise ConfigError("config key 'model.config': model.source is 'shape' but no config is given; give a known "
                          "shape (qwen2.5-7b, qwen2.5-72b, tiny-qwen2) or the path of a config.json")
    if model["source"] == "hub":
        if not model["revision"]:
            raise ConfigError("config key 'model.revision': a hub model needs a pinned revision (a commit hash)")
        check_commit("config key 'model.revision'", model["revision"])
    return config


def _check_speculation(engine: dict) -> None:
    """engine.speculation: population is the vLLM engine's (a custom proposer class); checked against the
    installed vLLM where there is one (a host that only builds the DAG for a cluster may have none)."""
    if engine["speculation"] == "none":
        return
    if engine["kind"] != "vllm":
        raise ConfigError(f"config key 'engine.speculation': {engine['speculation']} is wired for engine.kind vllm "
                          "only (on a CPU a draft-and-verify pass did not pay: bench/speculation/README.md); "
                          "use speculation: none with the torch engine")
    from randopt.engines.vllm_speculation import unsupported_reason
    why = unsupported_reason()
    if why:
        raise ConfigError(f"config key 'engine.speculation': {why}")


def _check_member_batch(config: dict) -> None:
    """engine.member_batch: members decoded together is the torch engine's (a stacked model), wired into full
    evaluation's evaluate_shard only."""
    batch = config["engine"]["member_batch"]
    if batch == 1:
        return
    if config["engine"]["kind"] != "torch":
        raise ConfigError(f"config key 'engine.member_batch': {batch} members decoded together is the torch "
                          "engine's (its model stacked over a member axis); use engine.kind torch, or member_batch: 1")
    if config["selection"]["mode"] == "racing":
        raise ConfigError(f"config key 'engine.member_batch': {batch} is wired into full evaluation only (racing "
                          "answers members per slice through the same answer cache, and batching there is not "
                          "built yet); use member_batch: 1, or selection.mode full")


def _check_selection(config: dict) -> None:
    """Racing's limits that the schema cannot say: rule exact's split size; at least k members race."""
    selection = config["selection"]
    if selection["mode"] != "racing":
        return
    n_train, where = problems_block(config)["n_train"], problems_key(config)
    if selection["rule"] == "exact" and n_train > EXACT_MAX_PROBLEMS:
        raise ConfigError(f"config key 'selection.rule': exact supports up to {EXACT_MAX_PROBLEMS} train problems "
                          f"({where}.n_train is {n_train}); use rule bayes, or a smaller {where}.n_train")


def distill_fraction(config: dict) -> float:
    """The top-k fraction whose list distill.enabled distills: distill.fraction, or the largest of topk.fractions."""
    chosen = (config.get("distill") or {}).get("fraction")
    return chosen if chosen is not None else max(config["topk"]["fractions"])


# The knobs of a distillation round: the distill block's, with the round's distill.round_overrides item over them.
ROUND_KNOBS = ("fraction", "per_problem", "lora", "train", "control")


def distill_rounds(config: dict) -> int:
    """Rounds of search then distillation: distill.rounds when distill.enabled, else the one search."""
    distill = config.get("distill") or {}
    return int(distill.get("rounds", 1)) if distill.get("enabled") else 1


def round_knobs(config: dict, round_index: int) -> dict:
    """Round round_index's distillation knobs (fraction resolved as distill_fraction does): the distill
    block's, with that round's round_overrides item deep-merged over them (round 1: the block's own)."""
    distill = config["distill"]
    knobs = {k: copy.deepcopy(distill[k]) for k in ROUND_KNOBS}
    for item in distill.get("round_overrides") or []:
        if item["round"] == round_index:
            for key, value in item.items():
                if key != "round":
                    knobs[key] = {**knobs[key], **value} if isinstance(value, dict) else value
    knobs["fraction"] = knobs["fraction"] if knobs["fraction"] is not None else max(config["topk"]["fractions"])
    return knobs


def _check_distill(config: dict) -> None:
    """distill's limits that the schema cannot say: each round's fraction is one of the run's top-k lists;
    round_overrides name rounds 2 .. rounds, once each; several rounds under full evaluation only."""
    distill = config["distill"]
    if not distill["enabled"]:
        return
    rounds, overrides = distill["rounds"], distill["round_overrides"]
    named = [item["round"] for item in overrides]
    late = sorted({r for r in named if r > rounds})
    if late:
        raise ConfigError(f"config key 'distill.round_overrides': rounds {late} are past distill.rounds ({rounds}); "
                          f"override rounds 2 to {rounds}, or raise distill.rounds")
    twice = sorted({r for r in named if named.count(r) > 1})
    if twice:
        raise ConfigError(f"config key 'distill.round_overrides': round {twice[0]} is given more than once; "
                          "merge its items into one")
    for r in range(1, rounds + 1):
        fraction = round_knobs(config, r)["fraction"]
        if fraction not in config["topk"]["fractions"]:
            where = "distill.fraction" if r == 1 else f"distill.round_overrides (round {r}) fraction"
            raise ConfigError(f"config key '{where}': {fraction} is not one of topk.fractions "
                              f"{config['topk']['fractions']}; give one of them, or null for the largest")
    if rounds > 1 and config["selection"]["mode"] == "racing":
        raise ConfigError(f"config key 'distill.rounds': {rounds} rounds are wired for selection.mode full only "
                          "(racing's rounds are round 1's search); use selection.mode full, or distill.rounds 1")


def check_model_files(config: dict) -> None:
    """The checks that need the file system, made when the DAG is built (before any job): a local model
    dir must exist, a shape's config must resolve, and under vLLM the tensor-parallel size must divide the
    model's attention heads (read from its config.json when the model dir is local or a shape; a hub or
    GGUF model is checked by the engine when it loads)."""
    model, engine = config["model"], config["engine"]
    if model["source"] == "shape":
        from randopt.io import InputError
        from randopt.model.shape import resolve_config
        try:
            heads, path = resolve_config(model["config"]).get("num_attention_heads"), model["config"]
        except InputError as err:
            raise ConfigError(f"config key 'model.config': {err}") from None
    elif model["source"] != "local":
        return
    else:
        path = Path(model["path"])
        if not path.is_dir():
            raise ConfigError(f"config key 'model.path': {path} is not a directory; give a Hugging Face model dir "
                              f"(config.json and safetensors weights), as an absolute path or relative to the "
                              f"working directory")
        heads = None
    tp = engine["tensor_parallel_size"]
    if engine["kind"] != "vllm" or tp == 1:
        return
    heads = heads or model_attention_heads(path)
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


# The decode keys a task's block sets for every task but GSM8K (whose prompt stays in decode).
_TASK_PROMPT_KEYS = ("system", "examples", "stop")


def _check_task_keys(config: dict) -> None:
    """Before defaults are filled (so that only what the config itself says counts): a task other
    than GSM8K takes its prompt and splits from task.<kind>, so GSM8K's places for them are errors,
    not silently ignored."""
    kind = (config.get("task") or {}).get("kind", "gsm8k")
    if kind == "gsm8k" or not isinstance(kind, str):
        return
    if config.get("gsm8k"):
        raise ConfigError(f"config key 'gsm8k': task.kind is {kind!r}, and the gsm8k block is GSM8K's only; put the "
                          f"split sizes and pins in task.{kind} (n_train, n_test, selection_seed, ...) and drop gsm8k")
    given = sorted(set(config.get("decode") or {}) & set(_TASK_PROMPT_KEYS))
    if given:
        raise ConfigError(f"config key 'decode.{given[0]}': task.kind is {kind!r}, whose prompt is task.{kind}'s "
                          f"(system, examples, stop, template); set task.{kind}.{given[0]} instead")


def prompt_block(config: dict, kind: str) -> dict:
    """The block holding a task's prompt (system, examples, stop), made if the config lacks it: decode's
    for GSM8K (as before tasks existed), task.<kind>'s for the others."""
    if kind == "gsm8k":
        return config.setdefault("decode", {})
    return config.setdefault("task", {}).setdefault(kind, {})


def resolve_prompt_style(config: dict) -> None:
    """Before defaults are filled (so that only what the config itself says counts): task.prompt_style's
    texts (the schema's prompt_styles) for the run's task, in the keys the config leaves out: its prompt
    block's system, examples and stop, and decode.max_tokens. The style then leaves no trace in any key:
    the keys hash the texts. terse has no texts (it is the schema's defaults), so a terse config stays as
    written. A style or kind the schema does not know is left for the schema check to name."""
    schema = load_schema()
    task = config.get("task") if isinstance(config.get("task"), dict) else {}
    defaults = schema["properties"]["task"]["properties"]
    kind, style = (task.get(key, defaults[key]["default"]) for key in ("kind", "prompt_style"))
    texts = (schema["prompt_styles"].get(style) or {}).get(kind) if isinstance(style, str) and isinstance(kind, str) else None
    if not texts or not isinstance(config.get("decode", {}), dict) or not isinstance(task.get(kind, {}), dict):
        return
    prompt = prompt_block(config, kind)
    for key, value in texts.items():
        (config.setdefault("decode", {}) if key == "max_tokens" else prompt).setdefault(key, copy.deepcopy(value))


def _check_task(config: dict) -> None:
    """What the schema cannot say about the task: its source gives a path or a pinned revision; a
    regex match has a valid pattern; Countdown's settings admit a solvable problem."""
    kind = config["task"]["kind"]
    if kind == "gsm8k":
        return
    block, name = config["task"][kind], lambda key: f"config key 'task.{kind}.{key}'"
    if kind == "math":
        source = block["source"]
        check_selected("task.math", source, block[source], lambda key: f"config key 'task.math.{source}.{key}'")
    elif kind == "jsonl":
        if not block["path"]:
            raise ConfigError(f"{name('path')}: task.kind is 'jsonl' but no path is given; give the JSONL file")
        if block["match"] == "regex":
            import re
            if not block["pattern"]:
                raise ConfigError(f"{name('pattern')}: match is 'regex' but no pattern is given")
            try:
                re.compile(block["pattern"])
            except re.error as err:
                raise ConfigError(f"{name('pattern')}: {block['pattern']!r} is not a regular expression ({err})") from None
    elif kind == "countdown":
        from randopt.tasks.countdown import check_settings
        from randopt.io import InputError
        try:
            check_settings(block)
        except InputError as err:
            raise ConfigError(f"config key 'task.countdown': {err}") from None


def check_task_files(config: dict) -> None:
    """At DAG build, for a task read from local files (HumanEval's come in its wheel): load its problems,
    so that a missing file, a row without a field (naming its line) or a split larger than the source
    fails before any job runs."""
    kind = config["task"]["kind"]
    local = kind in ("jsonl", "code") or (kind == "math" and config["task"]["math"]["source"] == "jsonl")
    if not local:
        return
    from randopt.io import InputError
    from randopt.tasks import registry
    block = config["task"][kind]
    try:
        pools = registry.make(task_spec(config)).load_pools()
    except InputError as err:
        raise ConfigError(f"config key 'task.{kind}': {err}") from None
    sizes = {split: len(p) for split, p in pools.items()}
    wanted = block["n_train"] + block["n_test"]
    if "all" in sizes and wanted > sizes["all"]:
        raise ConfigError(f"config key 'task.{kind}.n_train': n_train + n_test = {wanted} but the source holds "
                          f"{sizes['all']} problems; lower them to sum to at most {sizes['all']}")
    for split in ("train", "test"):
        if split in sizes and block[f"n_{split}"] > sizes[split]:
            raise ConfigError(f"config key 'task.{kind}.n_{split}': {block[f'n_{split}']} but {split}.jsonl holds "
                              f"{sizes[split]} problems; lower it to at most {sizes[split]}")


def task_spec(config: dict) -> dict:
    """The run's task as its freezer and the manifest name it: {"kind", **task.<kind>}; GSM8K's is
    {"kind": "gsm8k", "source": its selected source}."""
    kind = config["task"]["kind"]
    if kind == "gsm8k":
        return {"kind": "gsm8k", "source": gsm8k_source(config)}
    return {"kind": kind, **config["task"][kind]}


def task_kind(config: dict) -> str:
    """The run's task kind (a config validated before tasks existed, in an old record, has none: GSM8K)."""
    return (config.get("task") or {}).get("kind", "gsm8k")


def decode_for(config: dict) -> dict:
    """The decode block the engine stages get: the config's, with the task's prompt (system line,
    examples, stop strings) for every task but GSM8K, whose prompt is the decode block itself."""
    kind = task_kind(config)
    if kind == "gsm8k":
        return config["decode"]
    return config["decode"] | {key: config["task"][kind][key] for key in _TASK_PROMPT_KEYS}


def problems_block(config: dict) -> dict:
    """The block with the run's split sizes and pins: gsm8k, or task.<kind>."""
    kind = task_kind(config)
    return config["gsm8k"] if kind == "gsm8k" else config["task"][kind]


def problems_key(config: dict) -> str:
    """That block's name in the config, for messages."""
    kind = task_kind(config)
    return "gsm8k" if kind == "gsm8k" else f"task.{kind}"


def gsm8k_source(config: dict) -> dict:
    """The selected GSM8K source as one dict: {"kind": ..., **its block}."""
    kind = config["gsm8k"]["source"]
    return {"kind": kind, **config["gsm8k"][kind]}


def heldout_source(config: dict) -> dict:
    kind = config["heldout"]["source"]
    return {"kind": kind, **config["heldout"][kind]}


