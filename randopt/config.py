"""The whole run's config, validated when the DAG is built: the schema (randopt/schema.py, defaults
filled in), then the checks a schema cannot express. Every error names the key and says what to do.

Only the workflow and the tools that read a run import this module; the stages check their own
arguments with randopt/schema.py, so editing these checks reruns no stage (randopt/code_keys.py).
"""
from __future__ import annotations

import copy
import importlib.util
import json
import sys
from pathlib import Path

import yaml

from randopt.engines import compute_dtype
from randopt.population import population_size, topk_size
from randopt.schema import (SCHEMA_PATH, ConfigError, check_commit, check_decode,  # noqa: F401
                            check_engine_options, check_selected, check_source, decode_for, load_schema, task_kind,
                            validate_block, TASK_PROMPT_KEYS)
from randopt.selection.race_stops import EXACT_MAX_PROBLEMS



def load_yaml(path: str | Path) -> dict:
    """A config file's mapping; a YAML error names the file, line and column (FILE:LINE:COLUMN, as editors
    read it), where Snakemake's own message for a config file names neither."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: config file not found")
    try:
        data = yaml.safe_load(path.read_text())  # safe_load: a config can never construct objects
    except yaml.MarkedYAMLError as err:
        raise ConfigError(yaml_error_message(path, err)) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a config must be a YAML mapping, got {type(data).__name__}")
    return data


def yaml_error_message(path: Path, err: yaml.MarkedYAMLError) -> str:
    """One line: FILE:LINE:COLUMN (1-based, where the parser stopped), what it found there and what it was
    parsing (where that began), then the fix."""
    mark = err.problem_mark or err.context_mark
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
    context = ""
    if err.context:
        at = f" at line {err.context_mark.line + 1}, column {err.context_mark.column + 1}" if err.context_mark else ""
        context = f" ({err.context}{at})"
    fix = ("a config holds plain values only: remove the tag" if isinstance(err, yaml.constructor.ConstructorError)
           else "fix the YAML there")
    return f"{where}: not valid YAML: {err.problem or err.context}{context}; {fix}"


def exit_on_a_yaml_error(configfiles) -> None:
    """Snakemake reads the --configfile files in its command line, before the Snakefile runs, and says only "not
    valid JSON or YAML" of a syntax error. The workflow profile (profiles/default/config.yaml) is read before
    them and calls this: a file that is not valid YAML exits here, naming its file, line and column. Snakemake
    reads JSON first, so a valid JSON file passes as it does there; a missing file is Snakemake's to report."""
    for path in map(Path, configfiles):
        if not path.is_file():
            continue
        try:
            json.loads(path.read_text())
            continue
        except ValueError:
            pass
        try:
            load_yaml(path)
        except ConfigError as err:
            sys.exit(f"invalid config: {err}")


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
    _check_moved_keys(config)
    resolve_prompt_style(config)

    def label(path):
        return f"config key '{'.'.join(map(str, path)) or '(top level)'}'"

    schema = load_schema()
    validate_block(config, schema, label)
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
    _check_controls(config)
    source = config["heldout"]["source"]
    check_selected("heldout", source, config["heldout"][source], lambda key: f"config key 'heldout.{source}.{key}'")
    _check_task(config)
    try:
        compute_dtype.for_config(config)
    except ValueError as err:
        raise ConfigError(f"config key 'engine.compute_dtype': {err}") from None
    _check_other_engines_knobs(config["engine"], schema["properties"]["engine"]["properties"])
    if config["engine"]["worker_process"] and config["engine"]["kind"] != "vllm":
        raise ConfigError("config key 'engine.worker_process': a worker process of its own is vLLM's layout "
                          "(engine.kind vllm); the torch engine runs in its job's process: set it to false")
    if config["engine"]["batch_invariant"] and config["engine"]["kind"] != "vllm":
        raise ConfigError("config key 'engine.batch_invariant': batch-invariant decoding is vLLM's mode "
                          "(VLLM_BATCH_INVARIANT); the torch engine has none: set it to false, or use engine.kind vllm")
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
    if model["source"] == "gguf":
        _check_gguf(model["gguf"])
    if model["source"] == "hub":
        if not model["revision"]:
            raise ConfigError("config key 'model.revision': a hub model needs a pinned revision (a commit hash)")
        check_commit("config key 'model.revision'", model["revision"])
    return config


def _check_gguf(gguf: dict) -> None:
    """model.gguf: one file or its parts, each part a file or a package's file (randopt/model/gguf_source.py
    checks that several parts have the whole file's pin, when it resolves them in check_model_files)."""
    if bool(gguf["path"]) == bool(gguf["parts"]):
        raise ConfigError("config key 'model.gguf': model.source is 'gguf'; give either path (one GGUF file) or "
                          "parts (the file's pieces, in order), not " + ("both" if gguf["path"] else "neither"))
    for n, part in enumerate(gguf["parts"] or []):
        if set(part) - {"sha256"} not in ({"path"}, {"package", "file"}):
            raise ConfigError(f"config key 'model.gguf.parts[{n}]': give either path (a file) or package and file "
                              f"(a file inside an installed package), got {sorted(part)}")


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


# vLLM's knobs that the torch engine never reads: what each is, and what a value other than the schema's default
# would do under torch. (torch's own knobs under vLLM are refused where they are checked: compute_dtype,
# member_batch, torch_decode, perturbation.switch; worker_process and speculation are vLLM's, refused under torch.)
_VLLM_ONLY = {
    "tensor_parallel_size": ("GPUs per engine", "it enters the evaluation and bpb keys, so every search and "
                                                "scoring stage would rerun for nothing"),
    "gpu_memory_utilization": ("its share of the card", "the torch engine takes the memory it needs, so the cap "
                                                        "would hold nothing back"),
}
# engine.device values vLLM accepts: it runs on the GPUs its job claims (tensor_parallel_size of them), so it
# reads no device, and any other value would only move the evaluation key.
_VLLM_DEVICES = ("auto", "cuda")


def _check_other_engines_knobs(engine: dict, schema: dict) -> None:
    """An engine knob set for the engine the run does not use is refused, not ignored: it changes nothing the
    engine does, yet may change the keys (a rerun of everything) or promise what the run does not do."""
    if engine["kind"] == "torch":
        for key, (what, why) in _VLLM_ONLY.items():
            default = schema[key]["default"]
            if engine[key] != default:
                raise ConfigError(f"config key 'engine.{key}': {engine[key]!r} is vLLM's ({what}) and engine.kind is "
                                  f"torch, which never reads it; {why}: set it to {default!r} (the default), or use "
                                  f"engine.kind vllm")
    elif engine["device"] not in _VLLM_DEVICES:
        raise ConfigError(f"config key 'engine.device': {engine['device']!r} is the torch engine's choice; vLLM reads no "
                          f"device (it runs on the GPUs its job claims, engine.tensor_parallel_size of them), and the "
                          f"value enters the evaluation and bpb keys, so every stage would rerun for nothing; use "
                          f"device: cuda with engine.kind vllm, or engine.kind torch")


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


def _check_controls(config: dict) -> None:
    """controls.random_vote repeats top-k votes, so each of its fractions must be one of them; controls.random_members
    must hold a k-subset of the largest top-k list."""
    unknown = [f for f in config["controls"]["random_vote"] if f not in config["topk"]["fractions"]]
    if unknown:
        raise ConfigError(f"config key 'controls.random_vote': {unknown} not in topk.fractions "
                          f"{config['topk']['fractions']}; give fractions of topk.fractions (their random-k controls)")
    pool = config["controls"].get("random_members", 0)
    largest = max(topk_size(f, population_size(config)) for f in config["topk"]["fractions"])
    if 0 < pool < largest:
        raise ConfigError(f"config key 'controls.random_members': {pool} is below the largest top-k list's {largest} "
                          f"members; give 0 (off) or at least {largest}")


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
    """The checks that need the file system, made when the DAG is built (before any job): a GGUF's package
    and parts must be there, a local model dir must exist, a shape's config must resolve, and under vLLM the tensor-parallel size must divide the
    model's attention heads (read from its config.json when the model dir is local or a shape; a hub or
    GGUF model is checked by the engine when it loads)."""
    model, engine = config["model"], config["engine"]
    if model["source"] in ("gguf_wheel", "gguf"):
        from randopt.io import InputError
        from randopt.model import gguf_source
        try:
            gguf_source.resolve(gguf_source.spec_of(model))
        except InputError as err:
            raise ConfigError(f"config key '{gguf_source.config_key(model)}': {err}") from None
        return
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


def check_engine_installed(config: dict) -> None:
    """engine.kind vllm needs vLLM in the Python that runs the jobs (this one: the stages run as its modules),
    and engine.device cuda a CUDA device this host's driver shows.
    Found, not imported (importing vLLM takes seconds). The workflow asks only where jobs will run on this host
    (rules/common.smk, check_engine_here): a dry run of a GPU config on a CPU machine is a legitimate use."""
    if config["engine"]["kind"] == "vllm" and importlib.util.find_spec("vllm") is None:
        raise ConfigError(f"config key 'engine.kind': vllm, but vLLM is not installed in this Python ({sys.executable}); "
                          "install the GPU stack in a venv of its own and run its snakemake (docs/gpu.md: python3 -m "
                          "venv .venv-gpu && .venv-gpu/bin/pip install -r envs/requirements-gpu.txt), or use "
                          "engine.kind torch")
    device = str(config["engine"]["device"])
    if device == "cuda" or device.startswith("cuda:"):
        from randopt.runtime import cuda_driver
        if not cuda_driver.devices():
            raise ConfigError(f"config key 'engine.device': {device}, but this host has no usable CUDA device (no CUDA "
                              f"driver, or none visible under CUDA_VISIBLE_DEVICES); use engine.device auto or cpu "
                              f"here, or run on a host with a GPU")


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


def _check_moved_keys(config: dict) -> None:
    """Before defaults are filled: keys that moved when GSM8K became a task like the others get one line naming
    their new place (the schema would call them unknown, with no pointer). An unknown task.kind is named first:
    the moved keys are not what is wrong there."""
    from randopt.tasks.registry import KINDS
    kind = task_kind(config)
    if kind not in KINDS:  # the schema's message for task.kind alone, with its did-you-mean
        kind_schema = load_schema()["properties"]["task"]["properties"]["kind"]
        validate_block({"kind": kind}, {"type": "object", "properties": {"kind": kind_schema}},
                       lambda path: "config key 'task.kind'")
    if "gsm8k" in config:
        raise ConfigError("config key 'gsm8k': GSM8K's block is task.gsm8k now, as every task's is; move it there "
                          "(task: {gsm8k: {source: ..., n_train: ...}}), and decode.system, decode.examples and "
                          "decode.stop with it")
    given = sorted(set(config.get("decode") or {}) & set(TASK_PROMPT_KEYS)) \
        if isinstance(config.get("decode"), dict) else []
    if given:
        raise ConfigError(f"config key 'decode.{given[0]}': a prompt is the task's; set task.{kind}.{given[0]} "
                          f"instead")


def prompt_block(config: dict, kind: str) -> dict:
    """The block holding a task's prompt (system, examples, stop), task.<kind>, made if the config lacks it."""
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
    block, name = config["task"][kind], lambda key: f"config key 'task.{kind}.{key}'"
    if kind in ("gsm8k", "math"):
        source = block["source"]
        check_selected(f"task.{kind}", source, block[source], lambda key: f"config key 'task.{kind}.{source}.{key}'")
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
    """At DAG build, for a task read from local files (HumanEval's come in its wheel; GSM8K's from a jsonl
    dir): load its problems, so that a missing file, a row without a field or a GSM8K answer without
    '####' (naming its line) or a split larger than the source fails before any job runs."""
    kind = config["task"]["kind"]
    local = kind in ("jsonl", "code") or (kind in ("math", "gsm8k") and config["task"][kind]["source"] == "jsonl")
    if not local:
        return
    from randopt.io import InputError
    where = problems_key(config)
    block = problems_block(config)
    try:
        from randopt.tasks import registry
        pools = registry.make(task_spec(config)).load_pools()
    except InputError as err:
        source = f"{where}.jsonl.path" if block.get("source") == "jsonl" else where
        raise ConfigError(f"config key '{source}': {err}") from None
    sizes = {split: len(p) for split, p in pools.items()}
    wanted = block["n_train"] + block["n_test"]
    if "all" in sizes and wanted > sizes["all"]:
        raise ConfigError(f"config key '{where}.n_train': n_train + n_test = {wanted} but the source holds "
                          f"{sizes['all']} problems; lower them to sum to at most {sizes['all']}")
    for split in ("train", "test"):
        if split in sizes and block[f"n_{split}"] > sizes[split]:
            raise ConfigError(f"config key '{where}.n_{split}': {block[f'n_{split}']} but {split}.jsonl holds "
                              f"{sizes[split]} problems; lower it to at most {sizes[split]}")


def check_heldout_file(config: dict) -> None:
    """At DAG build: a local held-out file must be there (its rows are read when fetch_fineweb runs)."""
    source = heldout_source(config)
    if source["kind"] in ("jsonl", "parquet") and not Path(source["path"]).is_file():
        what = 'a JSONL file of {"text"} rows' if source["kind"] == "jsonl" else "a parquet file with a 'text' column"
        raise ConfigError(f"config key 'heldout.{source['kind']}.path': {source['path']}: file not found; give {what}, "
                          f"as an absolute path or relative to the working directory")


def external_inputs(config: dict) -> dict:
    """The run's external inputs (randopt/inputs.py), by the key they enter (randopt/keys.py): the model's
    bytes, the task's local files, the held-out file; a source with no local bytes is absent."""
    from randopt.data import heldout
    from randopt.model.prepare import model_input
    from randopt.tasks import freeze
    found = {"model": model_input(config["model"]), "problems": freeze.source_input(task_spec(config)),
             "heldout": heldout.source_input(heldout_source(config))}
    return {name: item for name, item in found.items() if item is not None}


def input_fingerprints(config: dict, cache_path=None) -> dict:
    """Each external input's digest (randopt/inputs.py; the stat cache at cache_path), with a GGUF's pins
    checked against it: a changed, missing or misplaced part fails here, naming it, before any job."""
    from randopt.inputs import fingerprints
    from randopt.io import InputError
    try:
        digests = fingerprints(external_inputs(config), cache_path)
    except InputError as err:
        raise ConfigError(str(err)) from None
    model = config["model"]
    if "model" in digests and model["source"] in ("gguf_wheel", "gguf"):
        from randopt.model import gguf_source
        spec = gguf_source.spec_of(model)
        try:
            gguf_source.check_pins(gguf_source.resolve(spec), digests["model"], spec["sha256"])
        except InputError as err:
            raise ConfigError(f"config key 'model.gguf': {err}") from None
    return digests


def check_inputs(config: dict, cache_path=None) -> dict:
    """Every check of the run's input files at DAG build, then their digests (input_fingerprints)."""
    check_model_files(config)
    check_task_files(config)
    check_heldout_file(config)
    return input_fingerprints(config, cache_path)


def task_spec(config: dict) -> dict:
    """The run's task as freeze_problems and the manifest name it: {"kind", **task.<kind>}."""
    kind = config["task"]["kind"]
    return {"kind": kind, **config["task"][kind]}


def problems_block(config: dict) -> dict:
    """The block with the run's split sizes and pins: task.<kind>."""
    return config["task"][task_kind(config)]


def problems_key(config: dict) -> str:
    """That block's name in the config, for messages."""
    return f"task.{task_kind(config)}"


def heldout_source(config: dict) -> dict:
    kind = config["heldout"]["source"]
    return {"kind": kind, **config["heldout"][kind]}


