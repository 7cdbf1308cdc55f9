"""Head padding (bench/tensor_parallel/head_padding.py): a model with 9 query heads and 3 kv heads (SmolLM2-135M's
shape), padded to 12 / 4 so vLLM can split it over 2 GPUs, computes the same function; the padding is
where grouped-query attention needs it (a misplaced kv head is caught); the torch engine runs it and
vLLM's TP 2 layout covers it."""
import json

import pytest
import torch

from bench.tensor_parallel.head_padding import PADDING_FILE, kv_head_of, pad_attention_heads
from randopt.io import InputError
from tests.support.tiny_model import build_tiny_qwen2

# head_dim 8 with hidden_size 72 = 9 x 8: after padding hidden_size != heads x head_dim, as for SmolLM2.
NINE_THREE = dict(num_attention_heads=9, num_key_value_heads=3, hidden_size=72)
ATTN = "model.layers.{}.self_attn.{}_proj.{}"


def load_tensors(model_dir) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file
    out = {}
    for path in sorted(model_dir.glob("*.safetensors")):
        out |= load_file(str(path))
    return out


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def nine_heads(request, tmp_path_factory):
    """A tiny Llama (tied embeddings, no biases) or Qwen2 (untied, q/k/v biases) with 9 / 3 heads.
    The Qwen2's biases are made nonzero (its init zeroes them), so their padding is tested too."""
    from safetensors.torch import save_file
    arch = request.param
    path = build_tiny_qwen2(tmp_path_factory.mktemp(arch) / "model", arch=arch, tie=arch == "llama",
                            dtype="float32", **NINE_THREE)
    if arch == "qwen2":
        tensors = load_tensors(path)
        gen = torch.Generator().manual_seed(3)
        for name in [n for n in tensors if n.endswith("_proj.bias")]:
            tensors[name] = torch.randn(tensors[name].shape, generator=gen)
        save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    return path


def logits(model_dir, ids: torch.Tensor) -> torch.Tensor:
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, local_files_only=True).eval()
    with torch.no_grad():
        return model(ids, attention_mask=torch.ones_like(ids)).logits


IDS = torch.randint(3, 300, (3, 40), generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("heads", [(12, 4), (18, 6)])
def test_the_padded_model_computes_the_same_function(nine_heads, tmp_path, heads):
    record = pad_attention_heads(nine_heads, tmp_path / "padded", *heads)
    a, b = logits(nine_heads, IDS), logits(tmp_path / "padded", IDS)
    assert a.abs().max() > 1  # a real signal (peaky random logits), not all zeros
    assert torch.allclose(a, b, rtol=0, atol=1e-5 * float(a.abs().max())), float((a - b).abs().max())
    assert torch.equal(a.argmax(-1), b.argmax(-1))
    assert record["heads"] == [9, heads[0]] and record["kv_heads"] == [3, heads[1]] and record["group"] == 3


def test_config_tensors_and_files(nine_heads, tmp_path):
    dst = tmp_path / "padded"
    record = pad_attention_heads(nine_heads, dst, 12, 4)
    src_config = json.loads((nine_heads / "config.json").read_text())
    config = json.loads((dst / "config.json").read_text())
    assert (config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]) == (12, 4, 8)
    assert config["hidden_size"] == 72 and config["tie_word_embeddings"] == src_config["tie_word_embeddings"]
    heads = ("num_attention_heads", "num_key_value_heads", "head_dim")
    assert {k: v for k, v in config.items() if k not in heads} == {k: v for k, v in src_config.items() if k not in heads}
    before, after = load_tensors(nine_heads), load_tensors(dst)
    assert set(before) == set(after)  # a tied model stays without lm_head.weight
    assert ("lm_head.weight" in after) == (not src_config["tie_word_embeddings"])
    d = 8
    for name, old in before.items():
        new = after[name]
        if ".self_attn.o_proj.weight" in name:
            assert new.shape == (72, 12 * d)
            assert torch.equal(new[:, :9 * d], old) and not new[:, 9 * d:].any()
        elif any(f".self_attn.{p}_proj." in name for p in "qkv"):
            heads = 12 if ".q_proj." in name else 4
            assert new.shape[0] == heads * d and torch.equal(new[:old.shape[0]], old) and not new[old.shape[0]:].any()
        else:
            assert torch.equal(new, old), name
    assert record["padded_tensors"] == sum(".self_attn." in n for n in before)  # Qwen2's q/k/v biases too
    assert json.loads((dst / PADDING_FILE).read_text()) == json.loads(json.dumps(record))
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        assert (dst / name).read_bytes() == (nine_heads / name).read_bytes(), name
    # grouped-query attention: each original query head still reads its original kv head
    assert [kv_head_of(h, 12, 4) for h in range(9)] == [kv_head_of(h, 9, 3) for h in range(9)]
    assert {kv_head_of(h, 12, 4) for h in range(9, 12)} == {3}


def test_a_misplaced_kv_head_is_caught(nine_heads, tmp_path):
    """The check above has teeth: with the new (zero) kv head put first instead of last, query heads
    0-2 read a zero kv head and 3-8 read the wrong ones, and the logits change a lot."""
    from safetensors.torch import save_file
    dst = tmp_path / "padded"
    pad_attention_heads(nine_heads, dst, 12, 4)
    tensors = load_tensors(dst)
    for name in [n for n in tensors if ".k_proj." in n or ".v_proj." in n]:
        tensors[name] = torch.roll(tensors[name], 8, dims=0)  # kv heads [0 1 2 new] -> [new 0 1 2]
    save_file(tensors, str(dst / "model.safetensors"), metadata={"format": "pt"})
    a, b = logits(nine_heads, IDS), logits(dst, IDS)
    assert float((a - b).abs().max()) > 0.05 * float(a.abs().max())


def test_requests_it_cannot_honour_are_refused(nine_heads, tmp_path):
    for heads, why in [((12, 3), "group size must stay 3"), ((6, 2), "kv heads can only grow"),
                       ((13, 4), "group size must stay 3")]:
        with pytest.raises(InputError, match="group size must stay 3"):
            pad_attention_heads(nine_heads, tmp_path / "x", *heads)
        assert not (tmp_path / "x").exists(), why
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    with pytest.raises(InputError, match="not a padded model"):
        pad_attention_heads(nine_heads, tmp_path / "mine", 12, 4)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep"
    with pytest.raises(InputError, match="source model dir"):
        pad_attention_heads(nine_heads, nine_heads, 12, 4)
    pad_attention_heads(nine_heads, tmp_path / "again", 12, 4)
    pad_attention_heads(nine_heads, tmp_path / "again", 18, 6)  # an earlier padded dir is replaced
    assert json.loads((tmp_path / "again" / "config.json").read_text())["num_attention_heads"] == 18
    assert sorted(p.name for p in tmp_path.iterdir()) == ["again", "mine"]  # no temporaries left


def test_the_torch_engine_runs_it_and_vllm_can_split_it(nine_heads, tmp_path):
    from randopt.engines.factory import make_engine
    from randopt.engines.vllm_layouts import attention_heads, checkpoint_shapes, model_layouts
    dst = tmp_path / "padded"
    pad_attention_heads(nine_heads, dst, 12, 4)
    texts = {}
    for label, path in (("original", nine_heads), ("padded", dst)):
        engine = make_engine("torch", str(path), device="cpu", batch_size=4, compute_dtype="float32")
        prompts = [engine.chat_prompt(q) for q in ("How many eggs are in 4 boxes?", "Tom has 5 apples.")]
        texts[label] = [o.text for o in engine.generate(prompts, max_tokens=12, stop=["\n\n"])]
        engine.set_weights(5, 0.05)
        texts[label + " seed 5"] = [o.text for o in engine.generate(prompts, max_tokens=12, stop=["\n\n"])]
        engine.close()
    assert texts["original"] == texts["padded"] and any(texts["padded"])
    assert texts["padded seed 5"] != texts["padded"]  # the padded tensors are perturbed like any other

    # vLLM at TP 2 (its local shapes, from its loaders' semantics): every checkpoint tensor is covered,
    # and rank 1 holds query heads 6-11 with kv heads 2-3, the ones they read.
    shapes, heads, d, tp = checkpoint_shapes(dst), attention_heads(dst), 8, 2
    assert heads == (12, 4)
    local = {}
    for name, shape in shapes.items():
        if ".k_proj." in name or ".v_proj." in name:
            continue
        if ".q_proj." in name:
            local[name.replace(".q_proj.", ".qkv_proj.")] = ((12 // tp + 2 * 4 // tp) * d,) + shape[1:]
        elif ".o_proj.weight" in name or ".down_proj." in name:
            local[name] = (shape[0], shape[1] // tp)
        elif ".gate_proj." in name:
            local[name.replace(".gate_proj.", ".gate_up_proj.")] = (2 * shape[0] // tp, shape[1])
        elif ".up_proj." in name:
            continue
        elif "embed_tokens" in name or "lm_head" in name:
            local[name] = (-(-shape[0] // 64) * 64 // tp, shape[1])
        else:
            local[name] = shape
    layout = model_layouts(local, shapes, heads, tp, 1)["model.layers.0.self_attn.qkv_proj.weight"]
    starts = [(b.name.split(".")[-2], b.logical_row, b.nrows) for b in layout.blocks]
    assert starts == [("q_proj", 6 * d, 6 * d), ("k_proj", 2 * d, 2 * d), ("v_proj", 2 * d, 2 * d)]
    assert {kv_head_of(h, 12, 4) for h in range(6, 12)} == {2, 3}
