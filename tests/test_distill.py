"""Distillation (distill.enabled; docs/distill.md) on the tiny random model: the merged weights are the
base plus the adapter's scaled product, an empty dataset is refused, the control has the distilled
dataset's size, a missing LoRA target is named, and a killed distill_train leaves nothing behind and
reruns to the same weights."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from randopt.distill import data
from randopt.distill.lora import check_model_dir
from randopt.distill.sample import sample_completions
from randopt.distill.train import train_lora
from randopt.engines.base import Completion
from randopt.engines.factory import make_engine
from randopt.io import InputError, read_jsonl, sha256_file, write_json_atomic, write_jsonl_atomic
from randopt.scoring import answer_cache
from randopt.stages import distill_data, distill_train
from tests.conftest import REPO
from tests.support.blocks import block

LORA = {"rank": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj", "down_proj"], "dropout": 0.0}
TRAIN = {"lr": 0.05, "epochs": 2, "max_length": 64, "seed": 0, "batch_size": 2}
ROWS = [{"problem": i, "problem_id": f"p{i}", "prompt": f"How many apples? {i}\n", "completion": f"#### {i + 3}",
         "source": "seed=0_sigma=0.01"} for i in range(4)]


def write_dataset(folder: Path, rows=ROWS) -> Path:
    path = folder / "distilled.jsonl"
    write_jsonl_atomic(path, rows)
    return path


def base_manifest(folder: Path, model_dir: Path) -> Path:
    path = folder / "base_manifest.json"
    write_json_atomic(path, {"sha256": sha256_file(model_dir / "model.safetensors")})
    return path


def train_stage(tmp_path: Path, model_dir: Path, out: Path, train=TRAIN) -> dict:
    distill_train.run(base_dir=str(model_dir), base_manifest=str(base_manifest(tmp_path, model_dir)),
                      data=str(write_dataset(tmp_path)), arm="distilled", round_index=1, lora=LORA, train=train,
                      out_model=str(out / "model"), out_adapter=str(out / "adapter"), manifest=str(out / "manifest.json"))
    return json.loads((out / "manifest.json").read_text())


def test_merged_weights_are_the_base_plus_the_adapters_scaled_product(tmp_path, tiny_model_dir):
    manifest = train_stage(tmp_path, tiny_model_dir, tmp_path / "out")
    base = load_file(tiny_model_dir / "model.safetensors")
    merged = load_file(tmp_path / "out" / "model" / "model.safetensors")
    adapter = load_file(tmp_path / "out" / "adapter" / "adapter_model.safetensors")
    config = json.loads((tmp_path / "out" / "adapter" / "adapter_config.json").read_text())
    scale = config["lora_alpha"] / config["r"]
    assert scale == LORA["alpha"] / LORA["rank"]
    checked = 0
    for name, w0 in base.items():
        assert merged[name].dtype == w0.dtype == torch.bfloat16  # the checkpoint dtype
        stem = "base_model.model." + name.removesuffix(".weight")
        a, b = adapter.get(f"{stem}.lora_A.weight"), adapter.get(f"{stem}.lora_B.weight")
        if a is None:
            assert torch.equal(merged[name], w0), f"{name} has no adapter but changed"
            continue
        expected = (w0.float() + scale * (b.float() @ a.float())).to(torch.bfloat16)
        # fp32 sums in another order may round to the neighbouring bf16 value, never further
        ulp = torch.finfo(torch.bfloat16).eps * expected.float().abs().clamp_min(torch.finfo(torch.bfloat16).tiny)
        assert ((merged[name].float() - expected.float()).abs() <= ulp).all(), name
        assert (merged[name] == expected).float().mean() > 0.99, name
        assert not torch.equal(merged[name], w0), f"{name}: training moved nothing"
        checked += 1
    assert checked == 2 * len(LORA["target_modules"])  # 2 layers, every target
    assert manifest["data_sha256"] == sha256_file(tmp_path / "distilled.jsonl")
    assert manifest["base_sha256"] == json.loads((tmp_path / "base_manifest.json").read_text())["sha256"]
    assert manifest["examples"] == len(ROWS) and manifest["steps"] == 4


def test_training_on_an_empty_dataset_is_refused(tmp_path, tiny_model_dir):
    with pytest.raises(InputError, match="dataset is empty"):
        train_lora(str(tiny_model_dir), [], LORA, TRAIN)
    write_jsonl_atomic(tmp_path / "empty.jsonl", [])
    proc = subprocess.run([sys.executable, "-m", "randopt.stages.distill_train", "--base-dir", str(tiny_model_dir),
                           "--base-manifest", str(base_manifest(tmp_path, tiny_model_dir)), "--data",
                           str(tmp_path / "empty.jsonl"), "--arm", "control", "--lora-file", block(tmp_path, LORA),
                           "--train-file", block(tmp_path, TRAIN), "--out-model", str(tmp_path / "m"), "--out-adapter", str(tmp_path / "a"),
                           "--manifest", str(tmp_path / "m.json")], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 2 and "dataset is empty" in proc.stderr
    assert not any((tmp_path / p).exists() for p in ("m", "a", "m.json"))


def test_a_target_module_the_model_lacks_is_named_with_the_ones_it_has(tiny_model_dir):
    check_model_dir(tiny_model_dir, LORA["target_modules"])  # all there
    with pytest.raises(InputError, match=r"distill.lora.target_modules.*no linear module named \['c_attn'\].*q_proj"):
        check_model_dir(tiny_model_dir, ["q_proj", "c_attn"])


# ------------------------------------------------------------------ the datasets

def test_keep_per_problem_keeps_distinct_texts_best_first_up_to_n():
    rows = [{"problem": p, "completion": c, "source": s} for p, c, s in
            [(1, "a", "m1"), (0, "x", "m1"), (1, "a", "m2"), (1, "b", "m2"), (1, "c", "m3"), (0, "y", "m3")]]
    kept = data.keep_per_problem(rows, 2)
    assert [(r["problem"], r["completion"], r["source"]) for r in kept] == [
        (0, "x", "m1"), (0, "y", "m3"), (1, "a", "m1"), (1, "b", "m2")]


@pytest.mark.parametrize("pool, size", [(10, 4), (3, 7), (5, 5)])
def test_resampling_gives_exactly_the_size_asked(pool, size):
    rows = [{"problem": i, "completion": str(i)} for i in range(pool)]
    picked, repeated = data.resample_to(rows, size, seed=0)
    assert len(picked) == size and repeated == (pool < size)
    assert len({r["completion"] for r in picked}) == min(pool, size)  # every row once before any repeats
    assert data.resample_to(rows, size, seed=0) == (picked, repeated)


def frozen_train(folder: Path, n: int = 4) -> Path:
    rows = [{"id": f"p{i}", "question": f"Tom has {i} apples and buys 3 more. How many?", "answer": f"so\n#### {i + 3}"}
            for i in range(n)]
    write_jsonl_atomic(folder / "train.jsonl", rows)
    return folder / "train.jsonl"


def cached_member(cache: Path, seed: int, sigma: float, answers: dict[int, str], n: int = 4) -> None:
    """A member's train answers in the answer cache: the completion of each problem, right when it ends in
    the problem's answer."""
    rows = pd.DataFrame([{"seed": seed, "sigma": sigma, "problem": i, "problem_id": f"p{i}",
                          "answer": answers[i].split()[-1], "correct": answers[i].endswith(f"#### {i + 3}"),
                          "n_tokens": 3, "finish": "stop", "completion": answers[i], "switch_s": 0.0, "generate_s": 0.0}
                         for i in range(n)])
    answer_cache.write_part(cache, rows)


def run_data_stage(tmp_path, tiny_model_dir, monkeypatch, right_samples: int, samples: int = 4):
    """distill_data on the tiny model, its sampler replaced by one whose first right_samples samples of
    every problem are right (the tiny model answers nothing right)."""
    def sampler(engine, prompts, *, n, temperature, seed, max_tokens, stop):
        return [[Completion(text=f"it is #### {i + 3 if j < right_samples else 0} v{j}", n_tokens=4, finish="stop")
                 for j in range(n)] for i in range(len(prompts))]
    monkeypatch.setattr(distill_data, "sample_completions", sampler)
    cache = tmp_path / "cache"
    cached_member(cache, 0, 0.01, {0: "#### 3", 1: "#### 4", 2: "#### 9", 3: "#### 6"})   # right on 0, 1, 3
    cached_member(cache, 1, 0.01, {0: "#### 3", 1: "so #### 4", 2: "#### 1", 3: "#### 0"})  # 0 repeats member 0
    topk = tmp_path / "topk.json"
    write_json_atomic(topk, {"topk": [{"fraction": 0.5, "k": 2, "members": [
        {"seed": 0, "sigma": 0.01, "rank": 1}, {"seed": 1, "sigma": 0.01, "rank": 2}]}]})
    out = {k: str(tmp_path / f"{k}.{ext}") for k, ext in (("distilled", "jsonl"), ("control", "jsonl"), ("manifest", "json"))}
    distill_data.run(make_engine=lambda: make_engine("torch", str(tiny_model_dir), device="cpu", batch_size=8),
                     decode={"max_tokens": 4}, train=str(frozen_train(tmp_path)), topk=str(topk), fraction=0.5,
                     cache_dir=str(cache), per_problem=4,
                     control={"temperature": 0.7, "seed": 0, "samples_per_problem": samples}, round_index=1,
                     out_distilled=out["distilled"], out_control=out["control"], manifest=out["manifest"])
    return read_jsonl(out["distilled"]), read_jsonl(out["control"]), json.loads(Path(out["manifest"]).read_text())


@pytest.mark.parametrize("right_samples", [1, 3])
def test_the_control_dataset_has_the_distilled_datasets_size(tmp_path, tiny_model_dir, monkeypatch, right_samples):
    distilled, control, manifest = run_data_stage(tmp_path, tiny_model_dir, monkeypatch, right_samples)
    # problem 0: one text (both members wrote "#### 3"); 1: two texts; 2: none; 3: member 0's
    assert [(r["problem"], r["source"]) for r in distilled] == [
        (0, "seed=0_sigma=0.01"), (1, "seed=0_sigma=0.01"), (1, "seed=1_sigma=0.01"), (3, "seed=0_sigma=0.01")]
    assert len(control) == len(distilled) == manifest["distilled"]["examples"] == manifest["control"]["examples"]
    assert manifest["control"]["pool"] == 4 * right_samples
    assert manifest["control"]["with_replacement"] is False  # 4 or 12 correct samples for 4 rows
    assert all(r["prompt"].startswith("<|im_start|>") for r in distilled + control)  # the scorer's chat prompt
    assert manifest["distilled"]["sha256"] == sha256_file(tmp_path / "distilled.jsonl")


def test_no_correct_completion_names_the_round_and_the_fixes(tmp_path, tiny_model_dir, monkeypatch):
    with pytest.raises(data.NoCorrectCompletions, match=r"distill round 1: the base model's 4 samples .*samples_per_problem"):
        run_data_stage(tmp_path, tiny_model_dir, monkeypatch, right_samples=0)
    assert not (tmp_path / "distilled.jsonl").exists()
    with pytest.raises(data.NoCorrectCompletions, match=r"distill round 2: the top 0.1 list.*population.n_seeds.*n_train.*sigmas"):
        data.require_rows([], "the top 0.1 list (3 members)", 2, data.DISTILLED_FIX)


def test_sampling_draws_n_per_prompt_and_a_rerun_draws_the_same(tiny_model_dir):
    engine = make_engine("torch", str(tiny_model_dir), device="cpu", batch_size=3)  # batches cut across prompts
    prompts = [engine.chat_prompt("How many apples?"), engine.chat_prompt("How many pears?")]

    def draw(seed):
        return [[c.text for c in cs] for cs in sample_completions(
            engine, prompts, n=4, temperature=1.0, seed=seed, max_tokens=6, stop=["\n\n"])]
    first = draw(0)
    assert len(first) == 2 and all(len(s) == 4 for s in first)
    assert len({t for s in first for t in s}) > 1  # sampled, not greedy
    assert draw(0) == first and draw(1) != first


# ------------------------------------------------------------------ a kill during distill_train

def kill_and_rerun(root: Path, model_dir: Path, env: dict) -> dict:
    """distill_train killed (its whole process group) once the Trainer has logged a step, what the kill left in
    its outputs' folder, then the rerun into the same outputs, and a run never killed: ~3 processes of ~6 s,
    made where the session queues it (fixture distill_kill_started, tests/conftest.py: in the background,
    beside other tests). env: the session's environment as it began."""
    long = TRAIN | {"epochs": 40}  # ~80 steps: long enough to be killed mid-way
    args = [sys.executable, "-m", "randopt.stages.distill_train", "--base-dir", str(model_dir),
            "--base-manifest", str(base_manifest(root, model_dir)), "--data", str(write_dataset(root)),
            "--arm", "distilled", "--lora-file", block(root, LORA), "--train-file", block(root, long),
            "--threads", "1"]
    out = root / "killed"
    outputs = ["--out-model", str(out / "model"), "--out-adapter", str(out / "adapter"), "--manifest", str(out / "manifest.json")]
    stdout = root / "stdout"
    with stdout.open("w") as log:
        proc = subprocess.Popen(args + outputs, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                env={**env, "PYTHONUNBUFFERED": "1"}, start_new_session=True)
        try:
            while "'loss'" not in stdout.read_text():  # the Trainer has logged a step
                assert proc.poll() is None, f"distill_train ended before the kill point:\n{stdout.read_text()}"
                time.sleep(0.05)
        finally:
            with contextlib.suppress(ProcessLookupError):   # gone already: the assertion above says why
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    after_kill = sorted(p.name for p in out.iterdir()) if out.exists() else []
    rerun = subprocess.run(args + outputs, cwd=REPO, capture_output=True, text=True, env=env)
    after_rerun = sorted(p.name for p in out.iterdir()) if out.exists() else []
    fresh = root / "fresh"
    never_killed = subprocess.run(args + ["--out-model", str(fresh / "model"), "--out-adapter", str(fresh / "adapter"),
                                          "--manifest", str(fresh / "manifest.json")],
                                  cwd=REPO, capture_output=True, text=True, env=env)
    return {"out": out, "fresh": fresh, "after_kill": after_kill, "rerun": rerun, "after_rerun": after_rerun,
            "never_killed": never_killed}


def test_a_kill_during_distill_train_leaves_nothing_and_a_rerun_trains_the_same_weights(distill_kill_started):
    """The chosen resume: the stage reruns whole (no Trainer checkpoints; outputs atomic, manifest last),
    and the seed makes the rerun's weights those of a run never killed."""
    runs = distill_kill_started.result()
    assert not [name for name in runs["after_kill"] if not name.startswith(".")], \
        f"a killed distill_train left {runs['after_kill']}"
    for name in ("rerun", "never_killed"):
        assert runs[name].returncode == 0, runs[name].stderr[-3000:]
    assert not [name for name in runs["after_rerun"] if name.startswith(".")], "the rerun left the killed run's temporaries"
    assert sha256_file(runs["out"] / "model" / "model.safetensors") == \
        sha256_file(runs["fresh"] / "model" / "model.safetensors")
