"""Every stage has a CLI with --help, and wildcards cannot make a path leave results/."""
import json
import subprocess
import sys

import pytest
import yaml

from tests.conftest import REPO
from tests.support.blocks import block, flag_block
from tests.support.workflow import SESSION_MEMO

# Every stage module (randopt/stages/_args.py is their shared arguments, no stage).
STAGES = sorted(p.stem for p in (REPO / "randopt" / "stages").glob("*.py") if not p.stem.startswith("_"))


# `python -m randopt.stages.<stage> --help` for every stage, in one Python process: each stage's module is run
# as __main__ (runpy, as -m does) with its own argv, its exit status and output kept apart. One
# process, not one a stage: each start would import torch and the library again (seconds each on 2 cores).
HELP_ALL = """
import contextlib, io, json, runpy, sys
results = {}
for stage in sys.argv[1:]:
    out, err = io.StringIO(), io.StringIO()
    sys.argv = ["-m", "--help"]
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            runpy.run_module(f"randopt.stages.{stage}", run_name="__main__", alter_sys=True)
        except SystemExit as exit:
            code = exit.code if isinstance(exit.code, int) else (0 if exit.code is None else 1)
        except BaseException as error:
            code = repr(error)
    results[stage] = {"returncode": code, "stdout": out.getvalue(), "stderr": err.getvalue()}
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def stage_processes(stage_cli_processes_started) -> dict:
    return stage_cli_processes_started.result()


@pytest.fixture(scope="module")
def helps(stage_processes) -> dict:
    proc = stage_processes["help"]
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


@pytest.mark.parametrize("stage", STAGES)
def test_stage_cli_help(stage, helps):
    result = helps[stage]
    assert result["returncode"] == 0, result["stderr"]
    assert "usage: python -m randopt.stages." in result["stdout"]


def test_stage_kwargs_leave_out_exactly_the_engine_arguments():
    """An engine stage's run() takes every parsed argument but the engine's (ENGINE_FLAGS): a flag that
    add_engine_args adds and ENGINE_FLAGS misses would reach run() as an unknown keyword."""
    import argparse
    from randopt.runtime.engine_args import ENGINE_FLAGS, add_engine_args, stage_kwargs
    p = argparse.ArgumentParser()
    add_engine_args(p)
    p.add_argument("--out")
    assert {a.dest for a in p._actions} - {"help", "out"} == set(ENGINE_FLAGS)
    assert stage_kwargs(p.parse_args(["--model-dir", "m", "--out", "o"])) == {"out": "o"}


@pytest.mark.slow  # each runs Snakemake
@pytest.mark.parametrize("target", [
    "results/shards/x/sigma=../../etc/seeds_0000-0001.parquet",
    "results/shards/x/sigma=0.1/seeds_../0000-0001.parquet",
    "results/shards/x/sigma=0.1/seeds_0000-00/../01.parquet",
])
def test_wildcards_cannot_escape_results(target, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"),
                           "--directory", str(tmp_path), "-n", "--cores", "1", target],
                          capture_output=True, text=True)
    assert proc.returncode != 0
    assert "No rule to produce" in proc.stdout + proc.stderr


@pytest.mark.slow
def test_invalid_config_fails_before_any_job(tmp_path):
    (tmp_path / "bad.yaml").write_text("population: {sigmas: []}\n")
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"),
                           "--directory", str(tmp_path), "--configfile", str(tmp_path / "bad.yaml"),
                           "--cores", "1"], capture_output=True, text=True)
    assert proc.returncode != 0
    assert "config key 'population.sigmas'" in proc.stdout + proc.stderr
    assert not (tmp_path / "results").exists()


# --- a stage CLI checks its JSON arguments against the schema's definitions -----------------------

def train_file(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps({"id": "train-0", "question": "1 + 1?", "answer": "1 + 1 = 2\n#### 2"}) + "\n")
    return path


@pytest.mark.parametrize("decode, options, says", [
    ({"max_tokens": 0}, {}, "--decode-file key 'max_tokens': must be >= 1 (got 0); the default is 32"),
    ({"max_tokens": 8, "stopp": []}, {}, "--decode-file: unknown key(s) ['stopp']"),
    ({"max_tokens": 8}, {"batchsize": 4}, "--engine-options-file: unknown key(s) ['batchsize']"),
    ({"max_tokens": 8}, {"batch_size": "4"}, '--engine-options-file key \'batch_size\': must be an integer (got "4", a string)'),
])
def test_engine_stage_cli_checks_decode_and_engine_options(tmp_path, capsys, decode, options, says):
    """Checked before any engine loads (the model dir here does not even exist): exit 2, one line."""
    from randopt.stages import evaluate_shard
    out = tmp_path / "o" / "shard.parquet"
    rc = evaluate_shard.main(["--model-dir", str(tmp_path / "no-model"), "--engine", "torch",
                              "--engine-options-file", block(tmp_path, options), "--decode-file", block(tmp_path, decode),
                              "--train", str(train_file(tmp_path)), "--sigma", "0.01", "--first-seed", "0",
                              "--last-seed", "0", "--cache-dir", str(out.parent / "cache"), "--out", str(out), "--timings", str(tmp_path / "o" / "t.json")])
    err = capsys.readouterr().err
    assert rc == 2 and f"error: {says}" in err, err
    assert not out.parent.exists()


def test_data_cli_checks_its_source_with_the_schema(tmp_path, capsys):
    from randopt.stages import fetch_fineweb
    out = tmp_path / "o" / "heldout.jsonl"
    rc = fetch_fineweb.main(["--source-file", block(tmp_path, {"kind": "synthetic", "n_docs": 4, "sede": 1}),
                             "--out", str(out), "--manifest", str(tmp_path / "o" / "m.json")])
    err = capsys.readouterr().err
    assert rc == 2 and "error: held-out source of kind 'synthetic': unknown key(s) ['sede']" in err, err
    assert not out.parent.exists()


# --- what needs the file system fails at DAG build (snakemake -n), naming the key and the fix ------

def dry_run(tmp_path, overlay, env=None):
    """`snakemake -n -p` (commands printed) on the default config with overlay, in tmp_path."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(overlay))
    return subprocess.run([sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"),
                           "--directory", str(tmp_path), "--configfile", str(tmp_path / "c.yaml"), "-n", "-p",
                           "--cores", "1"], capture_output=True, text=True, timeout=300, env=env)


def run_here(workdir, overlay, *targets, env=None):
    """The plain command (no dry run) on the default config with overlay, in workdir."""
    (workdir / "c.yaml").write_text(yaml.safe_dump(overlay))
    return subprocess.run([sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--directory",
                           str(workdir), "--configfile", str(workdir / "c.yaml"), "--cores", "1", *targets],
                          capture_output=True, text=True, timeout=300, env=env)


CUDA_HERE_OVERLAY = {"engine": {"device": "cuda"}}
VLLM_HERE_OVERLAY = {"engine": {"kind": "vllm", "device": "cuda"}}


def stage_cli_processes(root, model_dir, env) -> dict:
    """The processes of this module's tests (~45 s of one core: the stages' --help in one Python, and 14
    Snakemake starts), each in a folder of its own under root, made where the session queues it (fixture
    stage_cli_processes_started, tests/conftest.py: in the background, beside other tests), with what a test
    checks of a folder the moment its process ended. env: the session's environment as it began. The runs on
    CUDA and vLLM are made only where this host has neither (their tests skip otherwise: a run would start)."""
    import importlib.util

    from randopt.runtime import cuda_driver

    def folder(name):
        path = root / name
        path.mkdir(parents=True)
        return path
    procs: dict = {"root": root}
    procs["help"] = subprocess.run([sys.executable, "-c", HELP_ALL, *STAGES], cwd=REPO, capture_output=True, text=True,
                                   env=env)
    missing = folder("missing")
    procs["missing"] = dry_run(missing, {"model": {"source": "local", "path": str(missing / "absent")}}, env)
    vllm = {"kind": "vllm", "device": "cuda", "tensor_parallel_size": 3}
    procs["tp3"] = dry_run(folder("tp3"), {"model": {"source": "local", "path": str(model_dir)}, "engine": vllm}, env)
    procs["tp2"] = dry_run(folder("tp2"), {"model": {"source": "local", "path": str(model_dir)},
                                           "engine": {**vllm, "tensor_parallel_size": 2}}, env)
    procs["tp_torch"] = dry_run(folder("tp_torch"), {"engine": {"tensor_parallel_size": 3}}, env)
    weights_only = folder("weights") / "weights-only"
    weights_only.mkdir()
    (weights_only / "model.safetensors").write_bytes(b"\0" * 16)
    procs["weights_only"] = dry_run(weights_only.parent, {"model": {"source": "local", "path": str(weights_only)}}, env)
    fake = folder("gguf") / "model.gguf"
    fake.write_bytes(b"PK\x03\x04 a zip file under a .gguf name")
    procs["not_gguf"] = dry_run(fake.parent, {"model": {"source": "gguf", "gguf": {"path": str(fake)}}}, env)
    procs["task_kind"] = dry_run(folder("task_kind"), {"task": {"kind": "cdoe"}, "gsm8k": {"n_train": 8}}, env)
    if not cuda_driver.devices():
        cuda = folder("cuda")
        procs["cuda_dry"] = dry_run(cuda / "dry", CUDA_HERE_OVERLAY, env)
        procs["cuda_run"] = run_here(cuda, CUDA_HERE_OVERLAY, env=env)
    if importlib.util.find_spec("vllm") is None:
        no_vllm = folder("no_vllm")
        procs["vllm_dry"] = dry_run(no_vllm / "dry", VLLM_HERE_OVERLAY, env)
        procs["vllm_run"] = run_here(no_vllm, VLLM_HERE_OVERLAY, env=env)
        procs["vllm_run_made"] = [d for d in ("data", "results", "logs") if (no_vllm / d).exists()]
        procs["vllm_fetch"] = run_here(no_vllm, VLLM_HERE_OVERLAY, "fetch_fineweb", env=env)
    return procs


def test_missing_local_model_dir_fails_at_dag_build(stage_processes):
    proc, tmp_path = stage_processes["missing"], stage_processes["root"] / "missing"
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert f"config key 'model.path': {tmp_path / 'absent'} is not a directory" in out, out[-3000:]
    assert "give a Hugging Face model dir" in out
    assert not (tmp_path / "results").exists()


def test_tensor_parallel_size_must_divide_the_heads_at_dag_build(stage_processes):
    proc = stage_processes["tp3"]
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert ("config key 'engine.tensor_parallel_size': 3 does not divide the 4 attention heads" in out
            and "use one of [1, 2, 4]" in out), out[-3000:]
    # a divisor builds the DAG
    proc = stage_processes["tp2"]
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_a_tensor_parallel_size_under_the_torch_engine_fails_at_dag_build(stage_processes):
    """vLLM's GPUs per engine under the torch engine (issue 47): once accepted silently into the eval key, so a
    run recomputed everything for a knob no engine read."""
    proc, tmp_path = stage_processes["tp_torch"], stage_processes["root"] / "tp_torch"
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert ("invalid config: config key 'engine.tensor_parallel_size': 3 is vLLM's (GPUs per engine) and engine.kind "
            "is torch, which never reads it" in out and "set it to 1 (the default), or use engine.kind vllm" in out), \
        out[-3000:]
    assert not (tmp_path / "results").exists()


def test_a_local_model_dir_without_config_json_fails_at_dag_build(stage_processes):
    proc, tmp_path = stage_processes["weights_only"], stage_processes["root"] / "weights"
    model = tmp_path / "weights-only"   # a model.safetensors of 16 bytes, no config.json
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Traceback" not in out, out[-3000:]
    assert f"config key 'model.path': {model} is not a Hugging Face model dir (no config.json)" in out, out[-3000:]
    assert not (tmp_path / "results").exists()


def test_a_gguf_path_to_a_file_that_is_not_gguf_fails_at_dag_build(stage_processes):
    proc, tmp_path = stage_processes["not_gguf"], stage_processes["root"] / "gguf"
    fake = tmp_path / "model.gguf"   # a zip file's first bytes under a .gguf name
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Traceback" not in out, out[-3000:]
    assert f"config key 'model.gguf.path': {fake}: not a GGUF file" in out, out[-3000:]
    assert not (tmp_path / "results").exists()


def test_an_unknown_task_kind_beside_a_gsm8k_block_blames_the_kind(stage_processes):
    proc = stage_processes["task_kind"]
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Traceback" not in out, out[-3000:]
    assert "config key 'task.kind': must be one of" in out and 'did you mean "code"?' in out, out[-3000:]
    assert "config key 'gsm8k'" not in out


def test_device_cuda_without_cuda_fails_at_the_runs_start_not_under_a_dry_run(stage_processes):
    """As vLLM missing does (below): a dry run is a legitimate plan for another host; a run stops at its
    start (onstart), before any job, with the key and the fix, and no traceback."""
    from randopt.runtime import cuda_driver
    if cuda_driver.devices():
        pytest.skip("this host has CUDA: the run would start")
    tmp_path = stage_processes["root"] / "cuda"
    assert stage_processes["cuda_dry"].returncode == 0
    proc = stage_processes["cuda_run"]
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Traceback" not in out, out[-3000:]
    assert ("invalid config: config key 'engine.device': cuda, but this host has no usable CUDA device" in out
            and "use engine.device auto or cpu here" in out), out[-3000:]
    assert not any((tmp_path / d).exists() for d in ("data", "results", "logs"))  # no job ran


def test_vllm_missing_here_fails_at_the_runs_start_not_under_a_dry_run(stage_processes):
    """engine.kind vllm on a host without vLLM (issue 47: it failed only inside evaluate_shard). A dry run of a
    GPU config on a CPU machine stays legitimate; a run that would start engine jobs here stops at its start
    (onstart), before any job, with the key, the problem and the install; one that needs no engine runs."""
    import importlib.util
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here: the run would start")
    tmp_path = stage_processes["root"] / "no_vllm"
    assert stage_processes["vllm_dry"].returncode == 0
    proc = stage_processes["vllm_run"]
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert ("invalid config: config key 'engine.kind': vllm, but vLLM is not installed in this Python" in out
            and "pip install -r envs/requirements-gpu.txt), or use engine.kind torch" in out), out[-3000:]
    assert not stage_processes["vllm_run_made"]  # no job ran (seen before the run below)
    # the held-out text needs no engine: that run goes ahead
    proc = stage_processes["vllm_fetch"]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert list((tmp_path / "data" / "heldout").glob("*/heldout.jsonl"))


def engine_commands(proc) -> list[str]:
    stages = ("randopt.stages.evaluate_shard", "randopt.stages.evaluate_members", "randopt.stages.score_bpb")
    return [line for line in proc.stdout.splitlines() if any(s in line for s in stages)]


# The default config's dry run of check_reaches_engine_stages, once a session for each model dir: the
# delta switch (here) and static decode (tests/test_static_decode.py) each read it for their own option,
# and it is the same command on the same config either time (a dry run writes nothing it reads). Kept in
# tests/support/workflow.py: tests/test_static_decode.py imports this file as tests.test_stage_clis, a
# module other than the one pytest runs, with its own globals.
_DEFAULT_DRY_RUNS = SESSION_MEMO.setdefault("default_engine_stage_dry_runs", {})


def check_reaches_engine_stages(tmp_path, model_dir, overlay: dict, option: str, value: str) -> None:
    """`overlay` puts "option": "value" into every engine stage's --engine-options-file (4 of them on the tiny
    model), and the default config puts no "option" there."""
    tiny = {"model": {"source": "local", "path": str(model_dir)}, "population": {"shard_size": 32}}
    proc = dry_run(tmp_path / "chosen", {**tiny, **overlay})
    assert proc.returncode == 0, proc.stderr[-3000:]
    options = [flag_block(c, "--engine-options-file", tmp_path / "chosen") for c in engine_commands(proc)]
    assert len(options) == 4 and all(o.get(option) == value for o in options)
    if str(model_dir) not in _DEFAULT_DRY_RUNS:
        workdir = tmp_path / "default"
        _DEFAULT_DRY_RUNS[str(model_dir)] = (workdir, dry_run(workdir, tiny))
    workdir, proc = _DEFAULT_DRY_RUNS[str(model_dir)]
    assert proc.returncode == 0 and len(engine_commands(proc)) == 4
    assert not any(option in flag_block(c, "--engine-options-file", workdir) for c in engine_commands(proc))


def test_delta_switch_reaches_the_engine_stages_and_its_drift_is_recorded(tmp_path, tiny_model_dir):
    """perturbation.switch: delta goes into the engine stages' --engine-options-file (and nowhere under the
    default), the stage walks its seeds in place and its timings carry the drift it measured; the
    record's summary takes the worst stage."""
    from randopt.records.assemble import switch_summary
    from randopt.stages import evaluate_shard
    check_reaches_engine_stages(tmp_path, tiny_model_dir, {"perturbation": {"switch": "delta"}}, "switch", "delta")

    out = tmp_path / "o"
    rc = evaluate_shard.main(["--model-dir", str(tiny_model_dir), "--engine", "torch",
                              "--engine-options-file", block(tmp_path, {"device": "cpu", "switch": "delta"}),
                              "--decode-file", block(tmp_path, {"max_tokens": 2}), "--train", str(train_file(tmp_path)),
                              "--sigma", "0.05", "--first-seed", "0", "--last-seed", "2",
                              "--cache-dir", str(out / "cache"), "--out", str(out / "s.parquet"),
                              "--timings", str(out / "t.json")])
    assert rc == 0
    timings = json.loads((out / "t.json").read_text())
    drift = timings["drift"]
    assert drift["switch"] == "delta" and drift["switches"] == 4  # three seeds, then back to base
    assert drift["elements_changed"] > 0 and drift["max_abs"] > 0
    summary = switch_summary("delta", [timings, {"drift": None}, {"drift": {**drift, "max_abs": 1.0, "switches": 1}}])
    assert summary["drift"]["max_abs"] == 1.0 and summary["drift"]["switches"] == 5
    assert summary["drift"]["stages_measured"] == 2
    assert switch_summary("reconstruct", [timings]) == {"switch": "reconstruct", "drift": None}
