"""The GPU overlays for Qwen2.5-Coder-1.5B-Instruct (config/qwen15b_{gsm8k,countdown,humaneval}.yaml, issue 46):
each validates merged over config/config.yaml with FlashOpt's protocol and the reasoning prompt, its pinned
splits hold on the data it reads, and the workflow builds its DAG offline. Their model block is left to the
model source (issue 46), so the dry run builds it with the default's model in its place: the DAG's shape
does not depend on which model answers."""
from __future__ import annotations

import json

import pytest

from randopt.config import decode_for, load_schema, problems_block, task_spec
from randopt.io import sha256_bytes
from randopt.population import population_size, topk_size
from tests.conftest import REPO, SHARED_GSM8K, skip_unless_ci
from tests.support.blocks import flag_block
from tests.support.workflow import RUN_END, gsm8k_task, jobs_run
from tests.test_config import commands_of, subprocess_like
from tests.test_standard_config import merged, resources_of

OVERLAYS = {"gsm8k": "qwen15b_gsm8k.yaml", "countdown": "qwen15b_countdown.yaml", "code": "qwen15b_humaneval.yaml"}
SPLITS = {"gsm8k": (128, 512), "countdown": (128, 256), "code": (64, 100)}
# GSM8K: FlashOpt's 192 members; Countdown and HumanEval half of them, so that one H200 lease holds all three
MEMBERS = {"gsm8k": 192, "countdown": 96, "code": 96}
REASONING = load_schema()["prompt_styles"]["reasoning"]


def config_of(kind: str) -> dict:
    return merged(REPO / "config" / OVERLAYS[kind])


@pytest.mark.parametrize("kind", sorted(OVERLAYS))
def test_overlay_has_flashopts_protocol_on_one_gpu_with_the_reasoning_prompt(kind):
    c = config_of(kind)
    assert c["task"]["kind"] == kind and c["task"]["prompt_style"] == "reasoning"
    assert (c["engine"]["kind"], c["engine"]["device"], c["engine"]["tensor_parallel_size"]) == ("vllm", "cuda", 1)
    block = problems_block(c)
    assert (block["n_train"], block["n_test"]) == SPLITS[kind]
    assert c["engine"]["batch_size"] >= block["n_train"]  # a member's train prompts in one vLLM batch
    assert c["population"]["sigmas"] == [5e-4, 1e-3, 2e-3] and population_size(c) == MEMBERS[kind]
    assert c["population"]["n_seeds"] % c["population"]["shard_size"] == 0  # whole shards
    assert {0.04, 0.1, 0.25} <= set(c["topk"]["fractions"])
    assert [topk_size(f, population_size(c)) for f in (0.04, 0.1, 0.25)] == \
        ([8, 19, 48] if MEMBERS[kind] == 192 else [4, 10, 24])
    assert c["engine"]["engines_per_gpu"] == 3  # side by side under CUDA MPS (engine.cuda_mps auto)
    # what the engine stages get: the reasoning texts, 512 tokens, no stop strings
    decode = decode_for(c)
    assert decode["max_tokens"] == 512 and decode["stop"] == []
    assert (decode["system"], decode["examples"]) == (REASONING[kind]["system"], REASONING[kind]["examples"])
    assert c["model"]["source"] == "gguf_wheel"  # the model comes from config/models/qwen2.5-coder-1.5b.yaml


def test_gsm8k_overlay_reads_the_real_gsm8k_as_the_default_reads_a_local_copy():
    g = config_of("gsm8k")["task"]["gsm8k"]
    assert g["source"] == "jsonl" and g["jsonl"]["path"] == "../shared/data/gsm8k"
    assert g["train_sha256"] and g["test_sha256"]


@pytest.mark.parametrize("kind", ["gsm8k", "code"])
def test_the_pinned_splits_hold_on_the_data_the_overlay_reads(kind):
    """The pins were computed from the data; they must still hold (a different copy fails at the freeze)."""
    from randopt.data.splits import rows_to_jsonl
    from randopt.tasks.freeze import freeze_splits
    c = config_of(kind)
    block = problems_block(c)
    spec = task_spec(c)
    if kind == "gsm8k":
        if not (SHARED_GSM8K / "train.jsonl").is_file():
            skip_unless_ci(f"no GSM8K JSONL copy at {SHARED_GSM8K} (set RANDOPT_GSM8K_DIR)")
        spec = gsm8k_task({"kind": "jsonl", "path": str(SHARED_GSM8K)})  # the tests' copy
    train, test, _ = freeze_splits(spec, block["n_train"], block["n_test"], block["selection_seed"])
    assert (sha256_bytes(rows_to_jsonl(train)), sha256_bytes(rows_to_jsonl(test))) == \
        (block["train_sha256"], block["test_sha256"])


def dry_run_on_one_gpu(workdir, *overlays) -> str:
    """tests.test_config.dry_run with --resources gpu=1, which engines side by side need (the README's command)."""
    import os
    import subprocess

    from tests.support.workflow import SNAKEMAKE
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(workdir / "hf")}
    proc = subprocess.run([*SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir / "run"),
                           "--resources", "gpu=1", "--configfile", *map(str, overlays), "-n", "-p", "results/record.json"],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout + proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(OVERLAYS))
def test_overlay_builds_its_dag_offline(kind, tmp_path):
    c = config_of(kind)
    overlays = [REPO / "config" / OVERLAYS[kind]]
    if kind == "gsm8k":  # its path is relative to the run's directory: here the tests' copy, read at DAG build
        if not (SHARED_GSM8K / "train.jsonl").is_file():
            skip_unless_ci(f"no GSM8K JSONL copy at {SHARED_GSM8K} (set RANDOPT_GSM8K_DIR)")
        overlays.append(tmp_path / "gsm8k_here.yaml")
        overlays[-1].write_text(json.dumps({"task": {"gsm8k": {"jsonl": {"path": str(SHARED_GSM8K)}}}}))
    out = dry_run_on_one_gpu(tmp_path, *overlays)
    proc = subprocess_like(out)
    shards = len(c["population"]["sigmas"]) * c["population"]["n_seeds"] // c["population"]["shard_size"]
    assert jobs_run(proc) == {"freeze_problems": 1, "fetch_fineweb": 1, "prepare_model": 1, "evaluate_shard": shards,
                              "rank": 1, "evaluate_members_part": 3, "evaluate_members": 1, "vote": 1, "score_bpb": 1,
                              **RUN_END}
    assert shards == 6
    # three engines side by side on the one GPU: the jobs take engine slots, not GPUs
    assert all((res["engine_slot"], res["gpu"]) == ("1", "0") for res in resources_of(proc, "evaluate_shard"))
    # the engine stages get the resolved reasoning prompt (its texts, not the style's name)
    for command in commands_of(out, "evaluate_shard") + commands_of(out, "evaluate_members"):
        assert "--engine vllm" in command
        decode = flag_block(command, "--decode-file", tmp_path / "run")
        assert decode["max_tokens"] == 512 and decode["stop"] == []
        assert decode["system"] == REASONING[kind]["system"] and "prompt_style" not in decode


def test_the_distill_overlay_adds_distillation_to_the_gsm8k_run_and_nothing_else():
    """config/qwen15b_distill.yaml over the GSM8K overlay: the same search keys, distillation's on the top 10 %."""
    from snakemake.utils import update_config

    from randopt.config import load_yaml, validate
    from randopt.keys import run_keys
    base = config_of("gsm8k")
    raw = load_yaml(REPO / "config" / "config.yaml")
    for name in (OVERLAYS["gsm8k"], "qwen15b_distill.yaml"):
        update_config(raw, load_yaml(REPO / "config" / name))
    both = validate(raw)
    assert both["distill"]["enabled"] and both["distill"]["fraction"] in both["topk"]["fractions"]
    inputs = {"problems": "0" * 64}   # the GSM8K file's bytes key both alike
    with_distill, without = run_keys(both, inputs=inputs), run_keys(base, inputs=inputs)
    assert {k: with_distill[k] for k in without} == without   # the search is the GSM8K run's
    assert {"distill_data", "distill_train", "distill_eval"} <= set(with_distill)



@pytest.mark.parametrize("extra", sorted(p.name for p in (REPO / "bench" / "real_model").glob("*.yaml")))
def test_the_lease_overlays_validate_over_the_gsm8k_overlay(extra):
    """The overlays a lease adds with EXTRA_CONFIG (bench/real_model/*.yaml) validate over the GSM8K one: a
    misspelled key fails here, not in a device call."""
    from snakemake.utils import update_config

    from randopt.config import load_yaml, validate
    raw = load_yaml(REPO / "config" / "config.yaml")
    for path in (REPO / "config" / OVERLAYS["gsm8k"], REPO / "bench" / "real_model" / extra):
        update_config(raw, load_yaml(path))
    validate(raw)


def test_the_enginecheck_arms_differ_only_in_their_engines():
    """bench/real_model/enginecheck.yaml against the same with one_engine.yaml: auto's engines against one on 48
    members in 3 shards of 16 (one each for auto's 3). The engine count is in no key, so the two arms' answers
    share their cache folders, and the lease empties results/ between them to time each."""
    from snakemake.utils import update_config

    from randopt.config import load_yaml, validate
    from randopt.keys import run_keys

    def arm(*extras: str) -> dict:
        raw = load_yaml(REPO / "config" / "config.yaml")
        for path in [REPO / "config" / OVERLAYS["gsm8k"]] + [REPO / "bench" / "real_model" / e for e in extras]:
            update_config(raw, load_yaml(path))
        return validate(raw)

    auto, one = arm("enginecheck.yaml"), arm("enginecheck.yaml", "one_engine.yaml")
    assert (auto["engine"]["engines_per_gpu"], one["engine"]["engines_per_gpu"]) == ("auto", 1)
    assert population_size(auto) == 48 and auto["population"]["shard_size"] == 16
    assert {**auto, "engine": None} == {**one, "engine": None}
    inputs = {"problems": "0" * 64}
    assert run_keys(auto, inputs=inputs) == run_keys(one, inputs=inputs)
