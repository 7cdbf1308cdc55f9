import re
from pathlib import Path

import pytest

from randopt.config import ConfigError, check_source, load_schema, load_yaml, validate
from randopt.schema import resolve_ref
from tests.conftest import REPO
from tests.support.workflow import RUN_END


def test_default_config_validates_and_fills_defaults():
    config = validate(load_yaml(REPO / "config" / "config.yaml"))
    assert config["engine"]["kind"] == "torch"
    assert config["population"]["n_seeds"] * len(config["population"]["sigmas"]) >= 32
    assert config["model"]["trust_remote_code"] is False


@pytest.mark.parametrize("bad, key", [
    ({"populaton": {}}, "(top level)"),
    ({"population": {"sigmas": []}}, "population.sigmas"),
    ({"population": {"sigmas": [0.0]}}, "population.sigmas.0"),
    ({"population": {"sigmas": [-1e-3]}}, "population.sigmas.0"),
    ({"topk": {"fractions": [0.0]}}, "topk.fractions.0"),
    ({"topk": {"fractions": [1.5]}}, "topk.fractions.0"),
    ({"population": {"n_seeds": 2, "sigmas": [1e-3]}, "topk": {"fractions": [0.1]}}, "topk.fractions"),
    ({"model": {"source": "local"}}, "model.path"),
    ({"task": {"gsm8k": {"source": "jsonl"}}}, "task.gsm8k.jsonl.path"),
    ({"heldout": {"source": "hub"}}, "heldout.hub.revision"),
    ({"model": {"source": "hub", "id": "Qwen/Qwen2.5-72B-Instruct"}}, "model.revision"),
    ({"model": {"source": "hub", "id": "Qwen/Qwen2.5-72B-Instruct", "revision": "main"}}, "model.revision"),
    ({"task": {"gsm8k": {"source": "hub", "hub": {"revision": "v1.0"}}}}, "task.gsm8k.hub.revision"),
    ({"heldout": {"source": "hub", "hub": {"revision": "ABC"}}}, "heldout.hub.revision"),
    ({"engine": {"batch_size": 0}}, "engine.batch_size"),
    ({"decode": {"max_tokens": "many"}}, "decode.max_tokens"),
])
def test_bad_config_names_the_key(bad, key):
    with pytest.raises(ConfigError, match=re.escape(f"config key '{key}'")):
        validate(bad)


def test_yaml_is_loaded_safely(tmp_path):
    path = tmp_path / "evil.yaml"
    path.write_text("run_name: !!python/object/apply:os.system ['echo pwned']\n")
    with pytest.raises(Exception, match="could not determine a constructor|ConstructorError"):
        load_yaml(path)


# --- a YAML error names its file, line and column ---------------------------------------------------

BROKEN_YAML = "engine:\n  kind: torch\n  batch_size: [8, 16\nrun_name: x\n"  # the list never closes


def test_a_yaml_error_names_the_file_line_and_column(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text(BROKEN_YAML)
    with pytest.raises(ConfigError) as err:
        load_yaml(path)
    assert str(err.value) == (f"{path}:4:9: not valid YAML: expected ',' or ']', but got ':' (while parsing a flow "
                              "sequence at line 3, column 15); fix the YAML there")
    path.write_text("engine:\n\tkind: torch\n")  # a tab
    with pytest.raises(ConfigError, match=re.escape(f"{path}:2:1: not valid YAML: found character '\\t'")):
        load_yaml(path)


def test_the_profile_check_of_configfiles_exits_on_yaml_only(tmp_path):
    """exit_on_a_yaml_error (run by the workflow profile before Snakemake reads --configfile): a YAML error exits
    naming file and line; what Snakemake reads fine (JSON, even tab-indented) or reports itself (no file) passes."""
    from randopt.config import exit_on_a_yaml_error
    (tmp_path / "tabs.json").write_text('{\n\t"run_name": "x"\n}\n')
    (tmp_path / "ok.yaml").write_text("run_name: x\n")
    exit_on_a_yaml_error([tmp_path / "tabs.json", tmp_path / "ok.yaml", tmp_path / "absent.yaml"])
    (tmp_path / "broken.yaml").write_text(BROKEN_YAML)
    with pytest.raises(SystemExit) as exit_:
        exit_on_a_yaml_error([tmp_path / "ok.yaml", tmp_path / "broken.yaml"])
    assert str(exit_.value.code).startswith(f"invalid config: {tmp_path / 'broken.yaml'}:4:9: not valid YAML")


@pytest.mark.slow
def test_a_broken_overlay_and_a_broken_embedded_default_name_file_and_line_under_snakemake(tmp_path):
    """Snakemake itself says only "Config file is not valid JSON or YAML" (issue 47): a --configfile is read by its
    command line before the Snakefile runs, so the workflow profile reads it first; the embedded default is
    read by the Snakefile before its configfile: directive."""
    import subprocess

    from tests.support.workflow import SNAKEMAKE, copy_code
    overlay = tmp_path / "broken.yaml"
    overlay.write_text(BROKEN_YAML)
    proc = subprocess.run([*SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--directory", str(tmp_path / "run"),
                           "--configfile", str(overlay), "-n"], capture_output=True, text=True)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert (f"invalid config: {overlay}:4:9: not valid YAML: expected ',' or ']', but got ':' (while parsing a "
            "flow sequence at line 3, column 15)") in out, out[-3000:]
    assert not (tmp_path / "run").exists()
    code = copy_code(tmp_path / "code")
    embedded = code / "config" / "config.yaml"
    lines = embedded.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("  device: "))
    lines[at] = "  device: [cpu"
    embedded.write_text("\n".join(lines) + "\n")
    proc = subprocess.run([*SNAKEMAKE, "--snakefile", str(code / "Snakefile"), "--directory", str(tmp_path / "run"),
                           "-n"], capture_output=True, text=True)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    said = f"invalid config: {embedded}:{at + 2}:"  # the parser stops on the next line; the list began on this one
    assert said in out and f"(while parsing a flow sequence at line {at + 1}, column 11)" in out, out[-3000:]


# --- the schema is the one source of defaults and descriptions -----------------------------------

def schema_keys(schema: dict, root: dict, path: str = ""):
    """(dotted key, its schema) for every property of the config and of the schema's definitions,
    following $ref (the config's engine keys and source blocks are references into definitions)."""
    schema = resolve_ref(schema, root)
    for name, sub in schema.get("properties", {}).items():
        yield f"{path}{name}", sub, root
        yield from schema_keys(sub, root, f"{path}{name}.")
    for branch in schema.get("oneOf", []):
        yield from schema_keys(branch, root, path)


def test_every_schema_key_has_a_description():
    root = load_schema()
    keys = list(schema_keys(root, root)) + [
        (f"definitions.{d}.{k}", s, r) for d in root["definitions"] for k, s, r in schema_keys(root["definitions"][d], root)]
    assert len(keys) > 100
    missing = [key for key, sub, r in keys if not resolve_ref(sub, r).get("description")]
    assert not missing, f"schema keys without a description: {missing}"


def leaves(tree: dict, path: tuple = ()):
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            yield from leaves(value, path + (key,))
        else:
            yield path + (key,), value


def test_config_yaml_sets_only_what_differs_from_the_schema_defaults():
    """config/config.yaml cannot contradict the schema: each key it sets is a deliberate choice over the
    schema's default (so it differs from it), and the schema's defaults are the rest of the run."""
    defaults = validate({})
    embedded = load_yaml(REPO / "config" / "config.yaml")
    for path, value in leaves(embedded):
        default = defaults
        for part in path:
            default = default[part]
        assert value != default, f"config.yaml restates the schema default of {'.'.join(path)} ({value!r})"
    effective = validate(embedded)
    # The embedded default protocol, from the schema: 16 train and 48 test problems, 32 tokens, two sigmas.
    assert (effective["task"]["gsm8k"]["n_train"], effective["task"]["gsm8k"]["n_test"]) == (16, 48)
    assert effective["decode"]["max_tokens"] == 32
    assert effective["population"]["sigmas"] == [0.002, 0.004]
    assert effective["engine"]["device"] == "cpu" and defaults["engine"]["device"] == "auto"


# --- the data-source blocks are typed ---------------------------------------------------------------

@pytest.mark.parametrize("bad, key, says", [
    ({"task": {"gsm8k": {"generated": {"seed": 1, "n_train_pool": 9, "n_test_pool": 9, "sed": 2}}}}, "task.gsm8k.generated",
     "unknown key(s) ['sed']"),
    ({"task": {"gsm8k": {"generated": {"n_train_pool": "many"}}}}, "task.gsm8k.generated.n_train_pool",
     'must be an integer (got "many", a string); the default is 2000'),
    ({"task": {"gsm8k": {"generated": {"difficulty": "impossible"}}}}, "task.gsm8k.generated.difficulty",
     'must be one of "easy", "medium", "hard" or a mapping (got "impossible"); the default is "easy"'),
    ({"task": {"gsm8k": {"generated": {"difficulty": {"max_steps": 3}}}}}, "task.gsm8k.generated.difficulty",
     "key 'max_steps': must be one of 1, 2 (got 3)"),
    # an unused block is typed too: a typo there is not silently kept
    ({"task": {"gsm8k": {"jsonl": {"path": "x", "paht": "y"}}}}, "task.gsm8k.jsonl", "unknown key(s) ['paht']"),
    ({"task": {"gsm8k": {"hub": {"repo": "openai/gsm8k"}}}}, "task.gsm8k.hub", "missing key(s) ['revision']"),
    ({"heldout": {"synthetic": {"n_docs": 0}}}, "heldout.synthetic.n_docs", "must be >= 1 (got 0); the default is 32"),
    ({"heldout": {"jsonl": {"path": "a.jsonl", "rows": 3}}}, "heldout.jsonl", "unknown key(s) ['rows']"),
    ({"heldout": {"parquet": {"path": 7}}}, "heldout.parquet.path", "must be a string or null (got 7, an integer)"),
    ({"heldout": {"hub": {"revision": "f" * 40, "start": -1}}}, "heldout.hub.start", "must be >= 0 (got -1); the default is 0"),
    ({"heldout": {"source": "parquet"}}, "heldout.parquet.path", "heldout.source is 'parquet' but no path is given"),
    ({"engine": {"gpu_memory_utilization": 1.5}}, "engine.gpu_memory_utilization",
     'must be <= 1 (got 1.5); the default is "auto"'),
    ({"engine": {"gpu_memory_utilization": "half"}}, "engine.gpu_memory_utilization",
     'must be a number > 0 <= 1 or "auto" (got "half")'),
    ({"engine": {"engines_per_gpu": 0}}, "engine.engines_per_gpu", 'must be >= 1 (got 0); the default is "auto"'),
])
def test_source_blocks_are_typed(bad, key, says):
    with pytest.raises(ConfigError, match=re.escape(f"config key '{key}'") + ".*" + re.escape(says)):
        validate(bad)


# --- a schema error says the fix: the bound, what was given, the default; a typo gets the nearest name ----

@pytest.mark.parametrize("bad, says", [
    ({"population": {"n_seeds": 0}}, "config key 'population.n_seeds': must be >= 1 (got 0); the default is 32"),
    ({"population": {"sigmas": [0.002, 0.0]}}, "config key 'population.sigmas.1': must be > 0 (got 0.0)"),
    ({"selection": {"miss_budget": 1}}, "config key 'selection.miss_budget': must be < 1 (got 1); the default is 0.1"),
    ({"engine": {"draft_tokens": 64}}, "config key 'engine.draft_tokens': must be <= 32 (got 64); the default is 8"),
    ({"engine": {"kind": "vlm"}},
     'config key \'engine.kind\': must be one of "torch", "vllm" (got "vlm"; did you mean "vllm"?); the default is "torch"'),
    ({"decode": {"max_tokens": "many"}},
     'config key \'decode.max_tokens\': must be an integer (got "many", a string); the default is 32'),
    ({"run_name": "my run"}, 'config key \'run_name\': must match the pattern ^[A-Za-z0-9_.-]+$ (got "my run"); '
                             'the default is null'),  # null: the task, the model and the run key (randopt/plan/run_name.py)
    ({"populaton": {"n_seeds": 4}}, "config key '(top level)': unknown key(s) ['populaton']; did you mean 'population'? "
                                    "allowed: ['controls', 'decode', "),
    ({"population": {"n_seed": 4}}, "config key 'population': unknown key(s) ['n_seed']; did you mean 'n_seeds'? "
                                    "allowed: ['n_seeds', 'shard_size', 'sigmas']"),
    ({"population": {"seeds": 4, "sigma": [0.1]}},
     "unknown key(s) ['seeds', 'sigma']; did you mean 'n_seeds' for 'seeds', 'sigmas' for 'sigma'?"),
    ({"engine": {"cuda_mps": "yes"}}, 'config key \'engine.cuda_mps\': must be "auto" or true or false (got "yes"); '
                                      'the default is "auto"'),
])
def test_a_schema_error_says_the_bound_the_value_given_and_the_default(bad, says):
    with pytest.raises(ConfigError) as err:
        validate(bad)
    assert says in str(err.value)
    assert "\n" not in str(err.value)  # one line


def test_a_source_is_checked_by_the_same_definition_in_config_and_cli():
    source = {"kind": "generated", "seed": 1, "n_train_pool": 9, "n_test_pool": 9, "sed": 2}
    with pytest.raises(ConfigError, match=re.escape("GSM8K source of kind 'generated': unknown key(s) ['sed']")):
        check_source("gsm8k", source)
    assert check_source("heldout", {"kind": "jsonl", "path": "a.jsonl"}) == {
        "kind": "jsonl", "path": "a.jsonl", "start": 0, "n_docs": 256}
    with pytest.raises(ConfigError, match="unknown kind 'csv'"):
        check_source("heldout", {"kind": "csv"})


# --- perturbation.switch -----------------------------------------------------------------------------

def test_delta_switch_is_torch_only_and_changes_only_the_engine_keys():
    from randopt.keys import run_keys
    with pytest.raises(ConfigError, match=re.escape("config key 'perturbation.switch': delta is wired for engine.kind "
                                                    "torch only")):
        validate({"perturbation": {"switch": "delta"}, "engine": {"kind": "vllm", "device": "cuda"}})
    default = run_keys(validate({}))
    assert run_keys(validate({"perturbation": {"switch": "reconstruct"}})) == default  # the default's keys stay
    delta = run_keys(validate({"perturbation": {"switch": "delta"}}))
    changed = {k for k in default if default[k] != delta[k]}
    assert changed == {"eval", "bpb"}  # the drift changes what a seed's weights are; data and model stay

# --- engine.worker_process ---------------------------------------------------------------------------

def test_a_worker_process_is_vllms_and_changes_no_key():
    from randopt.keys import run_keys
    with pytest.raises(ConfigError, match=re.escape("config key 'engine.worker_process': a worker process of its own "
                                                    "is vLLM's layout")):
        validate({"engine": {"worker_process": True}})
    vllm = {"kind": "vllm", "device": "cuda"}
    assert validate({"engine": vllm})["engine"]["worker_process"] is False
    assert run_keys(validate({"engine": vllm | {"worker_process": True}})) == run_keys(validate({"engine": vllm}))

# --- engine.batch_invariant --------------------------------------------------------------------------

def test_batch_invariant_is_vllms_and_keys_eval_and_bpb_only_when_on():
    from randopt.keys import run_keys
    with pytest.raises(ConfigError, match=re.escape("config key 'engine.batch_invariant': batch-invariant decoding is "
                                                    "vLLM's mode")):
        validate({"engine": {"batch_invariant": True}})
    vllm = {"kind": "vllm", "device": "cuda"}
    assert validate({"engine": vllm})["engine"]["batch_invariant"] is False
    default = run_keys(validate({"engine": vllm}))
    assert run_keys(validate({"engine": vllm | {"batch_invariant": False}})) == default  # the default's keys stay
    on = run_keys(validate({"engine": vllm | {"batch_invariant": True}}))
    assert {k for k in default if default[k] != on[k]} == {"eval", "bpb"}

# --- a knob of the engine the run does not use -------------------------------------------------------

@pytest.mark.parametrize("engine, says", [
    # vLLM's GPUs per engine would enter the eval key under torch: everything recomputed for nothing (issue 47)
    ({"tensor_parallel_size": 3}, "config key 'engine.tensor_parallel_size': 3 is vLLM's (GPUs per engine) and "
                                  "engine.kind is torch, which never reads it; it enters the evaluation and bpb keys"),
    ({"kind": "torch", "device": "cuda", "gpu_memory_utilization": 0.5},
     "config key 'engine.gpu_memory_utilization': 0.5 is vLLM's (its share of the card) and engine.kind is torch"),
    # vLLM reads no device, yet the device is in the eval key
    ({"kind": "vllm", "device": "cpu"}, "config key 'engine.device': 'cpu' is the torch engine's choice; vLLM reads no "
                                        "device"),
    ({"kind": "vllm", "device": "cuda:1"}, "config key 'engine.device': 'cuda:1' is the torch engine's choice"),
])
def test_a_knob_of_the_other_engine_is_refused_with_the_fix(engine, says):
    with pytest.raises(ConfigError) as err:
        validate({"engine": engine})
    assert says in str(err.value)
    assert "use engine.kind" in str(err.value) or "engine.kind torch" in str(err.value)


def test_the_same_knobs_pass_with_their_own_engine_and_at_their_defaults():
    vllm = validate({"engine": {"kind": "vllm", "device": "cuda", "tensor_parallel_size": 2,
                                "gpu_memory_utilization": 0.5}})["engine"]
    assert (vllm["tensor_parallel_size"], vllm["gpu_memory_utilization"]) == (2, 0.5)
    assert validate({"engine": {"kind": "vllm"}})["engine"]["device"] == "auto"
    torch = validate({"engine": {"kind": "torch", "device": "cuda:1", "tensor_parallel_size": 1,
                                 "gpu_memory_utilization": "auto"}})["engine"]
    assert torch["device"] == "cuda:1"

# --- perturbation.noise -------------------------------------------------------------------------------

def test_the_schema_lists_the_kernels_noise_kinds_with_rademacher_the_default():
    from randopt.kernels.noise_kinds import KINDS, RADEMACHER
    noise = load_schema()["properties"]["perturbation"]["properties"]["noise"]
    assert tuple(noise["enum"]) == KINDS and noise["default"] == RADEMACHER
    options = load_schema()["definitions"]["engine_options"]["properties"]["noise"]
    assert tuple(options["enum"]) == KINDS


def test_an_unknown_noise_kind_names_the_key_and_the_kinds():
    with pytest.raises(ConfigError, match=re.escape("config key 'perturbation.noise': must be one of \"rademacher\", "
                                                    "\"gaussian\" (got \"uniform\"); the default is \"rademacher\"")):
        validate({"perturbation": {"noise": "uniform"}})


def test_gaussian_noise_changes_only_the_engine_keys_and_the_default_keeps_its_keys():
    from randopt.keys import run_keys
    default = run_keys(validate({}))
    assert validate({})["perturbation"]["noise"] == "rademacher"
    assert run_keys(validate({"perturbation": {"noise": "rademacher"}})) == default  # the default's keys stay
    gaussian = run_keys(validate({"perturbation": {"noise": "gaussian"}}))
    assert {k for k in default if default[k] != gaussian[k]} == {"eval", "bpb"}  # data and model stay
    both = run_keys(validate({"perturbation": {"noise": "gaussian", "switch": "delta"}}))
    assert len({default["eval"], gaussian["eval"], both["eval"]}) == 3
    # under vLLM too (the worker extension perturbs with the configured kind)
    vllm = {"engine": {"kind": "vllm", "device": "cuda"}}
    assert run_keys(validate(vllm | {"perturbation": {"noise": "gaussian"}}))["eval"] != run_keys(validate(vllm))["eval"]


@pytest.mark.slow
def test_an_unknown_noise_kind_fails_when_snakemake_builds_the_dag(tmp_path):
    """`snakemake -n` with perturbation.noise: uniform stops before any job, naming the key."""
    import os
    import subprocess

    import yaml

    from tests.support.workflow import SNAKEMAKE
    overlay = tmp_path / "bad.yaml"
    overlay.write_text(yaml.safe_dump({"perturbation": {"noise": "uniform"}}))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    proc = subprocess.run([*SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--directory", str(tmp_path / "run"),
                           "--configfile", str(overlay), "-n", "results/record.json"],
                          capture_output=True, text=True, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert 'config key \'perturbation.noise\': must be one of "rademacher", "gaussian" (got "uniform")' in out, out[-3000:]
    assert not (tmp_path / "run" / "results").exists()


@pytest.mark.slow
def test_gaussian_noise_reaches_every_engine_command_and_the_export(tmp_path, default_dry_run_at):
    """The engine stages get "noise": "gaussian" in their engine options only when it is chosen, so the
    default's commands (and params) are what they were; the export rule passes it too."""
    import yaml

    from tests.support.blocks import flag_block
    overlay = tmp_path / "gauss.yaml"
    overlay.write_text(yaml.safe_dump({"perturbation": {"noise": "gaussian"}}))
    out = dry_run(tmp_path / "g", overlay)
    engine_rules = ("evaluate_shard", "evaluate_members", "score_bpb")
    options = lambda command, workdir: flag_block(command, "--engine-options-file", workdir)  # noqa: E731
    for rule in engine_rules:
        commands = commands_of(out, rule)
        assert commands and all(options(c, tmp_path / "g" / "run")["noise"] == "gaussian" for c in commands), rule
    workdir, default = default_dry_run_at
    for rule in engine_rules:
        assert all("noise" not in options(c, workdir) for c in commands_of(default, rule)), rule
    export = dry_run_target(tmp_path / "e", overlay, target="export")
    assert any("--noise gaussian" in c for c in commands_of(export, "export_member"))


def dry_run_target(workdir, *configfiles, target: str) -> str:
    """Like dry_run, for another target (the export's DAG builds from the ranking it would write)."""
    import os
    import subprocess

    from tests.support.workflow import SNAKEMAKE
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(workdir / "hf")}
    extra = [arg for path in configfiles for arg in ("--configfile", str(path))]
    proc = subprocess.run([*SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir / "run"),
                           *extra, "-n", "-p", target], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout + proc.stderr

# --- every shipped config, and the default through Snakemake ---------------------------------------

CONFIG_DIR = REPO / "config"
OVERLAYS = sorted(p.name for p in CONFIG_DIR.glob("*.yaml") if p.name not in ("config.yaml", "schema.yaml"))


def test_the_shipped_overlays_are_all_checked():
    assert {"default_vllm.yaml", "one_gpu_qwen7b.yaml", "standard_8xh100_qwen72b.yaml", "countdown.yaml"} <= set(OVERLAYS)


def catalog_rows() -> dict[str, list[str]]:
    """config/README.md's table: a file's path -> its row's cells (file, what for, command, needs)."""
    rows = {}
    for line in (CONFIG_DIR / "README.md").read_text(encoding="utf-8").splitlines():
        if line.startswith("| `config/"):
            cells = [cell.strip() for cell in line.strip("|").split(" | ")]
            rows[cells[0].strip("`")] = cells
    return rows


def test_the_catalog_lists_every_config_file_with_its_command_and_its_gpu():
    """config/README.md has a row for each file of config/ (the embedded default, every overlay, the model
    fragments, the schema) and for no other; each overlay's command gives it as a --configfile; the needs
    say GPU exactly where the file's own engine runs on one."""
    rows = catalog_rows()
    assert sorted(rows) == sorted(p.relative_to(REPO).as_posix() for p in CONFIG_DIR.rglob("*.yaml"))
    for name in OVERLAYS:
        command = rows[f"config/{name}"][2]
        assert "--configfile" in command and f"config/{name}`" in command, (name, command)
    for name in [*OVERLAYS, "config.yaml"]:
        engine = load_yaml(CONFIG_DIR / name).get("engine", {})
        on_gpu = engine.get("kind") == "vllm" or engine.get("device") == "cuda"
        assert ("GPU" in rows[f"config/{name}"][3]) == on_gpu, name


@pytest.mark.parametrize("name", OVERLAYS)
def test_every_overlay_validates_merged_over_the_default(name):
    """Each config/*.yaml is an overlay: merged over config/config.yaml as --configfile merges it, it
    must validate (a key the schema does not know, a bad value, a hub source without a commit fail)."""
    from snakemake.utils import update_config
    config = load_yaml(CONFIG_DIR / "config.yaml")
    overlay = load_yaml(CONFIG_DIR / name)
    update_config(config, overlay)
    merged = validate(config)
    assert merged["run_name"] == overlay["run_name"] != validate(load_yaml(CONFIG_DIR / "config.yaml"))["run_name"]


def dry_run(workdir, *configfiles) -> str:
    """`snakemake -n -p results/record.json` of the embedded default (plus overlays) in an empty dir,
    offline; returns its output. Building the DAG reads no data, model or hub."""
    import os
    import subprocess

    from tests.support.workflow import SNAKEMAKE
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(workdir / "hf")}
    extra = [arg for path in configfiles for arg in ("--configfile", str(path))]
    proc = subprocess.run([*SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir / "run"),
                           *extra, "-n", "-p", "results/record.json"], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert not (workdir / "run" / "results").exists() and not (workdir / "hf").exists()
    return proc.stdout + proc.stderr


def commands_of(out: str, rule: str) -> list[str]:
    return [block.split("Shell command:", 1)[1].split("\n", 1)[0] if "Shell command:" in block else block
            for block in out.split(f"rule {rule}:")[1:]]


@pytest.fixture(scope="module")
def default_dry_run_at(tmp_path_factory) -> tuple[Path, str]:
    """dry_run of the embedded default, once for the module's tests that read it: the directory it ran in (where
    its commands' block files lie, randopt/block_files.py) and its output."""
    workdir = tmp_path_factory.mktemp("default-dry-run")
    return workdir / "run", dry_run(workdir)


@pytest.fixture(scope="module")
def default_dry_run(default_dry_run_at) -> str:
    return default_dry_run_at[1]


@pytest.mark.slow
def test_the_embedded_default_dry_runs_through_snakemake(default_dry_run_at):
    """`make record`'s config (no --configfile): its DAG, with the generated GSM8K-style data and the
    synthetic held-out text it reads, whatever real data the machine has."""
    from tests.support.blocks import flag_block
    from tests.support.workflow import jobs_run
    workdir, out = default_dry_run_at
    default = validate(load_yaml(CONFIG_DIR / "config.yaml"))
    pop = default["population"]
    shards = len(pop["sigmas"]) * -(-pop["n_seeds"] // pop["shard_size"])
    assert jobs_run(subprocess_like(out)) == {"freeze_problems": 1, "fetch_fineweb": 1, "prepare_model": 1,
                                              "evaluate_shard": shards, "rank": 1, "evaluate_members": 1, "vote": 1,
                                              "score_bpb": 1, **RUN_END}
    (freeze,) = commands_of(out, "freeze_problems")
    assert flag_block(freeze, "--task-file", workdir)["source"] == "generated"
    assert f"--n-train {default['task']['gsm8k']['n_train']}" in freeze
    (fetch,) = commands_of(out, "fetch_fineweb")
    assert flag_block(fetch, "--source-file", workdir)["kind"] == "synthetic"
    assert all("--engine torch" in c for c in commands_of(out, "evaluate_shard"))
    # no warning of its own: racing's decision is named a local rule only where racing's rules exist
    assert "not present in the Snakefile" not in out, out[:2000]


@pytest.mark.slow
def test_gsm8k_and_countdown_get_their_problems_from_the_one_freeze_rule(default_dry_run_at, tmp_path):
    """GSM8K is one task among the others: the workflow has one freeze rule, and the default (GSM8K) and
    config/countdown.yaml both freeze their problems with it, each into its own data/problems/<key>, which
    their engine stages read."""
    import subprocess

    from tests.support.workflow import SNAKEMAKE, jobs_run
    listed = subprocess.run([*SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--directory", str(tmp_path),
                             "--list-rules"], capture_output=True, text=True)
    assert listed.returncode == 0, listed.stderr[-3000:]
    assert [r for r in listed.stdout.split() if r.startswith("freeze")] == ["freeze_problems"]
    from tests.support.blocks import flag_block
    countdown = dry_run(tmp_path, CONFIG_DIR / "countdown.yaml")
    folders = []
    for (workdir, out), kind in ((default_dry_run_at, "gsm8k"), ((tmp_path / "run", countdown), "countdown")):
        assert jobs_run(subprocess_like(out))["freeze_problems"] == 1
        (freeze,) = commands_of(out, "freeze_problems")
        assert flag_block(freeze, "--task-file", workdir)["kind"] == kind
        folders.append(re.search(r"--out-train (data/problems/[0-9a-f]{12})/train\.jsonl", freeze).group(1))
        shards = commands_of(out, "evaluate_shard")
        assert shards and all(f"{folders[-1]}/train.jsonl" in c for c in shards)
    assert folders[0] != folders[1]  # each task's problems under their own key


@pytest.mark.slow
def test_the_default_on_vllm_dry_runs_through_snakemake(tmp_path):
    from tests.support.blocks import flag_block
    from tests.support.workflow import jobs_run
    out = dry_run(tmp_path, CONFIG_DIR / "default_vllm.yaml")
    jobs = jobs_run(subprocess_like(out))
    assert jobs["evaluate_shard"] == 2  # 32 seeds x 2 sigmas in shards of 32
    assert all("--engine vllm" in c for c in commands_of(out, "evaluate_shard"))
    (freeze,) = commands_of(out, "freeze_problems")
    assert flag_block(freeze, "--task-file", tmp_path / "run")["source"] == "generated"  # the CPU default's data


def subprocess_like(out: str):
    """jobs_run reads a CompletedProcess's stdout and stderr."""
    import subprocess
    return subprocess.CompletedProcess([], 0, out, "")


@pytest.mark.parametrize("old, says", [
    ({"gsm8k": {"n_train": 8}}, "config key 'gsm8k': GSM8K's block is task.gsm8k now"),
    ({"decode": {"system": "Be brief."}}, "config key 'decode.system': a prompt is the task's; set task.gsm8k.system"),
    ({"task": {"kind": "countdown"}, "decode": {"stop": []}}, "set task.countdown.stop instead"),
])
def test_a_key_that_moved_names_its_new_place(old, says):
    """GSM8K's block moved under task.gsm8k, and every task's prompt lives in its block: a config written before
    gets one line naming the new place (the schema alone would say only "unknown key")."""
    with pytest.raises(ConfigError, match=re.escape(says)):
        validate(old)
    assert validate({"task": {"gsm8k": {"n_train": 8, "system": "Be brief."}}})["task"]["gsm8k"]["n_train"] == 8
