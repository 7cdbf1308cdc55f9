"""Exporting a member: the weights are the member's bit for bit, transformers runs them as the engine
does, and bad input fails clearly leaving nothing behind."""
import json
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from randopt.kernels.noise_ref import reconstruct_reference_
from randopt.engines.factory import make_engine
from randopt.result.export import MEMBER_FILE, export_member
from randopt.io import InputError, sha256_file
from randopt.model.prepare import combined_sha256, weights_sha256
from tests.support.tiny_model import build_tiny_qwen2


def test_exported_weights_equal_an_independent_reconstruction(tiny_model_dir, tmp_path):
    out = tmp_path / "member"
    member = export_member(tiny_model_dir, 7, 0.01, out)
    base = load_file(str(tiny_model_dir / "model.safetensors"))
    got = load_file(str(out / "model.safetensors"))
    assert set(got) == set(base) - {"lm_head.weight"}          # tied: one tensor, as the engine perturbs it
    for name, tensor in base.items():
        if name in got:
            expected = torch.empty_like(tensor)
            reconstruct_reference_(expected, tensor, 7, 0.01, name)
            assert got[name].dtype == tensor.dtype and torch.equal(got[name], expected), name
    described = json.loads((out / MEMBER_FILE).read_text())
    assert described == member
    assert described["seed"] == 7 and described["sigma"] == 0.01 and described["noise"] == "kernels/noise_ref.py v1"
    assert described["base_sha256"] == combined_sha256(weights_sha256(tiny_model_dir))
    assert described["weights_sha256"] == {"model.safetensors": sha256_file(out / "model.safetensors")}
    for name in ("config.json", "tokenizer.json", "generation_config.json"):
        assert (out / name).read_bytes() == (tiny_model_dir / name).read_bytes()


def test_transformers_on_the_export_decodes_as_the_engine_at_that_member(tiny_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM
    out = tmp_path / "member"
    export_member(tiny_model_dir, 3, 0.05, out)
    engine = make_engine("torch", str(tiny_model_dir), device="cpu", batch_size=1, compute_dtype="bfloat16")
    engine.set_weights(3, 0.05)
    model = AutoModelForCausalLM.from_pretrained(out, dtype="auto").eval()
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()   # still tied
    for text in ("How many apples does Tom have?", "Each box holds 6 eggs."):
        prompt = engine.chat_prompt(text)
        ids = engine.tokenizer(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            new = model.generate(ids, max_new_tokens=12, do_sample=False, temperature=None, top_p=None, top_k=None,
                                 pad_token_id=engine.tokenizer.pad_token_id)[0, ids.shape[1]:].tolist()
        completion = engine.generate([prompt], max_tokens=12, stop=[])[0]
        assert engine.tokenizer.decode(new[:completion.n_tokens], skip_special_tokens=True) == completion.text


def test_an_untied_model_exports_every_tensor(tmp_path):
    untied = build_tiny_qwen2(tmp_path / "untied", tie=False)
    member = export_member(untied, 1, 0.02, tmp_path / "out")
    got = load_file(str(tmp_path / "out" / "model.safetensors"))
    base = load_file(str(untied / "model.safetensors"))
    assert set(got) == set(base) and member["tied_aliases_dropped"] == []
    expected = torch.empty_like(base["lm_head.weight"])
    reconstruct_reference_(expected, base["lm_head.weight"], 1, 0.02, "lm_head.weight")
    assert torch.equal(got["lm_head.weight"], expected)


@pytest.mark.parametrize("seed,sigma,match", [(-1, 0.01, "seed must be"), (2**63, 0.01, "seed must be"),
                                              (1, 0.0, "sigma must be"), (1, float("nan"), "sigma must be")])
def test_bad_seed_or_sigma_is_a_clear_error_and_writes_nothing(tiny_model_dir, tmp_path, seed, sigma, match):
    with pytest.raises(InputError, match=match):
        export_member(tiny_model_dir, seed, sigma, tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


def test_a_missing_base_is_a_clear_error(tmp_path):
    with pytest.raises(InputError, match="no base model here"):
        export_member(tmp_path / "nope", 1, 0.01, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_failure_midway_leaves_no_half_export(tiny_model_dir, tmp_path, monkeypatch):
    from randopt.result import export
    calls = {"n": 0}
    real = export.perturb.reconstruct_

    def fail_on_third(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("killed")
        return real(*args, **kwargs)

    monkeypatch.setattr(export.perturb, "reconstruct_", fail_on_third)
    with pytest.raises(RuntimeError):
        export_member(tiny_model_dir, 1, 0.01, tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


def export_command(root, model_dir, env):
    """The command as a user runs it: a process of ~10 s, made where the session queues it (fixture
    export_command_started, tests/conftest.py: in the background, beside other tests). env: the session's
    environment as it began. (the process, its --out)"""
    return subprocess.run([sys.executable, "-m", "randopt.stages.export_member", "--model-dir", str(model_dir),
                           "--seed", "5", "--sigma", "0.003", "--out", str(root / "m")], capture_output=True, text=True,
                          env=env), root / "m"


def test_the_cli_exports_and_refuses_bad_input(export_command_started, tiny_model_dir, tmp_path, capsys):
    """The command as a user runs it (its own process), then a bad sigma through the same main() in this
    process (a second interpreter and torch import would check nothing more)."""
    from randopt.stages.export_member import main
    ok, out = export_command_started.result()
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["seed"] == 5 and (out / "model.safetensors").is_file()
    capsys.readouterr()
    rc = main(["--model-dir", str(tiny_model_dir), "--seed", "5", "--sigma", "-1", "--out", str(tmp_path / "bad")])
    assert rc == 2 and "sigma must be" in capsys.readouterr().err and not (tmp_path / "bad").exists()
    with pytest.raises(SystemExit) as exit:  # a seed without its sigma: a usage error, exit 2 as any bad input
        main(["--model-dir", str(tiny_model_dir), "--seed", "5", "--out", str(tmp_path / "bad")])
    assert exit.value.code == 2 and "give either --seed and --sigma, or --ranking and --rank" in capsys.readouterr().err


# --- a Gaussian member (perturbation.noise: gaussian) ---------------------------------------------------

def _gaussian_member_by_hand(base: torch.Tensor, seed: int, sigma: float, name: str) -> torch.Tensor:
    """The Gaussian member of one bf16 tensor from the written definition (randopt/kernels/noise_ref.py), with
    hashlib, numpy uint32 arithmetic and the shipped table only: no randopt code."""
    import hashlib

    import numpy as np
    from randopt.kernels.noise_ref import GAUSSIAN_TABLE  # the file's path; its bits are read here with numpy

    digest = hashlib.sha256(b"randopt-gauss-v2\0" + seed.to_bytes(8, "little") + name.encode()).digest()
    ka, kb = (np.uint32(int.from_bytes(digest[a:a + 4], "little")) for a in (0, 4))

    def fmix32(h):
        h = h ^ (h >> np.uint32(16))
        h = h * np.uint32(0x85EBCA6B)
        h = h ^ (h >> np.uint32(13))
        h = h * np.uint32(0xC2B2AE35)
        return h ^ (h >> np.uint32(16))

    h = fmix32(fmix32(np.arange(base.numel(), dtype=np.uint32) ^ ka) ^ kb)
    table = np.fromfile(GAUSSIAN_TABLE, dtype="<u4")
    g = (table[(h >> np.uint32(16)) & np.uint32(0x7FFF)] | (h & np.uint32(0x80000000))).view(np.float32)
    w0 = (base.reshape(-1).view(torch.int16).numpy().view(np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)
    w = w0 + np.float32(sigma) * g  # the product rounded to fp32, then the sum (numpy: two operations)
    u = w.view(np.uint32)
    rounded = ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype(np.uint16)
    return torch.from_numpy(rounded.view(np.int16).copy()).view(torch.bfloat16).view(base.shape)


def test_a_gaussian_export_equals_an_independent_reconstruction(tiny_model_dir, tmp_path):
    out = tmp_path / "gaussian"
    member = export_member(tiny_model_dir, 7, 0.01, out, noise="gaussian")
    assert member["noise"] == "kernels/noise_ref.py gaussian v2"
    assert json.loads((out / MEMBER_FILE).read_text()) == member
    base = load_file(str(tiny_model_dir / "model.safetensors"))
    got = load_file(str(out / "model.safetensors"))
    export_member(tiny_model_dir, 7, 0.01, tmp_path / "r")  # the same seed under the default noise
    rademacher = load_file(str(tmp_path / "r" / "model.safetensors"))
    for name, tensor in got.items():
        assert tensor.dtype == torch.bfloat16
        assert torch.equal(tensor, _gaussian_member_by_hand(base[name], 7, 0.01, name)), name
        assert not torch.equal(tensor, rademacher[name]), name
    from randopt.stages.export_member import main  # the CLI's --noise reaches the export (its process: the test above)
    assert main(["--model-dir", str(tiny_model_dir), "--seed", "7", "--sigma", "0.01", "--noise", "gaussian",
                 "--out", str(tmp_path / "cli")]) == 0
    assert sha256_file(tmp_path / "cli" / "model.safetensors") == member["weights_sha256"]["model.safetensors"]
    with pytest.raises(InputError, match="perturbation.noise"):
        export_member(tiny_model_dir, 7, 0.01, tmp_path / "bad", noise="uniform")
    assert not (tmp_path / "bad").exists()
