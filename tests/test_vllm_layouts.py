"""The vLLM parameter -> checkpoint tensor mapping, on the shapes vLLM gives a Qwen2 model."""
import pytest
import torch

from randopt.kernels.noise_ref import reconstruct_reference_
from randopt.engines import perturb
from randopt.engines.vllm_layouts import layout_for, model_layouts

HIDDEN, INTER, HEADS, KV, HEAD_DIM, VOCAB, LAYERS = 64, 96, 8, 2, 8, 1000, 2


def checkpoint():
    shapes = {"model.embed_tokens.weight": (VOCAB, HIDDEN), "model.norm.weight": (HIDDEN,),
              "lm_head.weight": (VOCAB, HIDDEN)}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        shapes |= {p + "self_attn.q_proj.weight": (HEADS * HEAD_DIM, HIDDEN), p + "self_attn.q_proj.bias": (HEADS * HEAD_DIM,),
                   p + "self_attn.k_proj.weight": (KV * HEAD_DIM, HIDDEN), p + "self_attn.k_proj.bias": (KV * HEAD_DIM,),
                   p + "self_attn.v_proj.weight": (KV * HEAD_DIM, HIDDEN), p + "self_attn.v_proj.bias": (KV * HEAD_DIM,),
                   p + "self_attn.o_proj.weight": (HIDDEN, HEADS * HEAD_DIM), p + "mlp.gate_proj.weight": (INTER, HIDDEN),
                   p + "mlp.up_proj.weight": (INTER, HIDDEN), p + "mlp.down_proj.weight": (HIDDEN, INTER),
                   p + "input_layernorm.weight": (HIDDEN,), p + "post_attention_layernorm.weight": (HIDDEN,)}
    return shapes


def vllm_shapes(tp: int) -> dict[str, tuple[int, ...]]:
    """The local parameter shapes vLLM's Qwen2 has on one rank at tensor-parallel size tp."""
    padded = -(-VOCAB // 64) * 64
    kv_local = max(1, KV // tp)
    shapes = {"model.embed_tokens.weight": (padded // tp, HIDDEN), "model.norm.weight": (HIDDEN,),
              "lm_head.weight": (padded // tp, HIDDEN)}
    qkv = (HEADS // tp + 2 * kv_local) * HEAD_DIM
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        shapes |= {p + "self_attn.qkv_proj.weight": (qkv, HIDDEN), p + "self_attn.qkv_proj.bias": (qkv,),
                   p + "self_attn.o_proj.weight": (HIDDEN, HEADS * HEAD_DIM // tp),
                   p + "mlp.gate_up_proj.weight": (2 * INTER // tp, HIDDEN), p + "mlp.down_proj.weight": (HIDDEN, INTER // tp),
                   p + "input_layernorm.weight": (HIDDEN,), p + "post_attention_layernorm.weight": (HIDDEN,)}
    return shapes


# --- vLLM's weight loaders, written here from their semantics (not from randopt/kernels/layout.py) -----------
# What each vLLM layer's weight_loader copies from a checkpoint tensor into its rank's parameter:
#   QKVParallelLinear          param = [q rows of this rank; k rows; v rows]: q takes head block `rank`;
#                              k and v take head block rank // replicas, where with tp >= kv heads each
#                              rank holds one kv head (replicas = tp / kv heads), else kv heads / tp.
#   MergedColumnParallelLinear param = [gate rows of this rank; up rows of this rank], each the rank's
#                              1/tp of that tensor's rows.
#   RowParallelLinear          the rank's 1/tp of the input columns; a 1-D bias is loaded whole.
#   VocabParallelEmbedding /   the vocab padded up to a multiple of 64 and cut into tp equal row ranges;
#   ParallelLMHead             rank r loads checkpoint rows [r*per, min((r+1)*per, vocab)) and fills
#                              the rest of its rows (padding) with 0.
#   everything else            loaded whole (replicated).


def rows(t: torch.Tensor, start: int, n: int) -> torch.Tensor:
    return t.narrow(0, start, n)


def load_qkv(ckpt: dict, prefix: str, suffix: str, tp: int, rank: int) -> torch.Tensor:
    head_dim = ckpt[f"{prefix}q_proj.{suffix}"].shape[0] // HEADS
    q_heads = HEADS // tp
    kv_heads, replicas = (1, tp // KV) if tp >= KV else (KV // tp, 1)
    q = rows(ckpt[f"{prefix}q_proj.{suffix}"], rank * q_heads * head_dim, q_heads * head_dim)
    kv_block = rank // replicas
    k = rows(ckpt[f"{prefix}k_proj.{suffix}"], kv_block * kv_heads * head_dim, kv_heads * head_dim)
    v = rows(ckpt[f"{prefix}v_proj.{suffix}"], kv_block * kv_heads * head_dim, kv_heads * head_dim)
    return torch.cat([q, k, v])


def load_gate_up(ckpt: dict, prefix: str, tp: int, rank: int) -> torch.Tensor:
    parts = [ckpt[f"{prefix}{p}_proj.weight"] for p in ("gate", "up")]
    return torch.cat([rows(t, rank * (t.shape[0] // tp), t.shape[0] // tp) for t in parts])


def load_row_parallel(t: torch.Tensor, tp: int, rank: int) -> torch.Tensor:
    if t.dim() == 1:
        return t.clone()
    per = t.shape[1] // tp
    return t.narrow(1, rank * per, per).clone()


def load_vocab(t: torch.Tensor, tp: int, rank: int) -> torch.Tensor:
    padded = -(-t.shape[0] // 64) * 64
    per = padded // tp
    start, end = min(rank * per, t.shape[0]), min((rank + 1) * per, t.shape[0])
    param = torch.empty((per,) + tuple(t.shape[1:]), dtype=t.dtype)
    param[:end - start] = t[start:end]
    param[end - start:] = 0
    return param


def vllm_load(ckpt: dict, tp: int, rank: int) -> dict[str, torch.Tensor]:
    """Rank `rank`'s vLLM parameters (vLLM's names) loaded from checkpoint tensors `ckpt`."""
    params = {}
    for name in vllm_shapes(tp):
        if ".qkv_proj." in name:
            prefix, suffix = name.split("qkv_proj.")
            params[name] = load_qkv(ckpt, prefix, suffix, tp, rank)
        elif ".gate_up_proj." in name:
            params[name] = load_gate_up(ckpt, name.split("gate_up_proj.")[0], tp, rank)
        elif ".o_proj." in name or ".down_proj." in name:
            params[name] = load_row_parallel(ckpt[name], tp, rank)
        elif name in ("model.embed_tokens.weight", "lm_head.weight"):
            params[name] = load_vocab(ckpt[name], tp, rank)
        else:
            params[name] = ckpt[name].clone()
    return params


def test_the_test_loaders_give_vllms_local_shapes():
    ckpt = {n: torch.zeros(s, dtype=torch.bfloat16) for n, s in checkpoint().items()}
    for tp in (1, 2, 4, 8):
        for rank in range(tp):
            assert {n: tuple(t.shape) for n, t in vllm_load(ckpt, tp, rank).items()} == vllm_shapes(tp), (tp, rank)


@pytest.mark.parametrize("noise", ["rademacher", "gaussian"])
@pytest.mark.parametrize("tp", [1, 2, 4, 8])  # 8 > kv heads: each kv head replicated over 4 ranks
def test_every_rank_perturbs_exactly_what_vllm_loaded_there(tp, noise):
    """Perturbing a rank's parameters through randopt's layouts gives, bit for bit, what vLLM's loaders
    would put on that rank from the perturbed checkpoint: every element gets the noise of the checkpoint
    element vLLM placed there, and padding rows stay as loaded (0); under either noise kind."""
    shapes = checkpoint()
    torch.manual_seed(0)
    full_base = {n: torch.randn(s).to(torch.bfloat16) for n, s in shapes.items()}
    full_perturbed = {}
    for n, t in full_base.items():
        full_perturbed[n] = torch.empty_like(t)
        reconstruct_reference_(full_perturbed[n], t, 5, 0.01, n, noise)
    for rank in range(tp):
        base = vllm_load(full_base, tp, rank)
        layouts = model_layouts({n: tuple(t.shape) for n, t in base.items()}, shapes, (HEADS, KV), tp, rank)
        live = {n: t.clone() for n, t in base.items()}
        perturb.reconstruct_local_(live, base, 5, 0.01, layouts, noise)
        want = vllm_load(full_perturbed, tp, rank)
        for name in base:
            assert torch.equal(live[name], want[name]), (tp, rank, name)
            assert not torch.equal(live[name], base[name]), (tp, rank, name)  # the rank's share was perturbed


def test_a_shape_vllm_does_not_have_is_a_clear_error():
    with pytest.raises(ValueError, match="does not match the layout"):
        layout_for("model.layers.0.mlp.gate_up_proj.weight", (7, HIDDEN), checkpoint(), (HEADS, KV), 1, 0)


def test_a_checkpoint_tensor_left_out_is_an_error():
    named = vllm_shapes(1)
    del named["model.layers.1.mlp.down_proj.weight"]
    with pytest.raises(ValueError, match="no vLLM parameter"):
        model_layouts(named, checkpoint(), (HEADS, KV), 1, 0)


@pytest.mark.parametrize("noise", ["rademacher", "gaussian"])
def test_the_worker_extension_perturbs_each_rank_with_its_noise(tmp_path, monkeypatch, noise):
    """RandoptWorkerExtension itself, on the CPU (vLLM's rank functions and the CUDA sync stood in): on
    each rank of TP 2 (fused qkv and gate_up, row-parallel, padded vocab) randopt_setup(model_dir, noise)
    then randopt_set gives exactly what vLLM's loaders would place there from the perturbed
    checkpoint, and randopt_restore gives the loaded weights back."""
    import json
    import sys
    import types

    from safetensors.torch import save_file

    from randopt.engines.vllm_worker import RandoptWorkerExtension

    tp = 2
    shapes = checkpoint()
    torch.manual_seed(1)
    full_base = {n: torch.randn(s).to(torch.bfloat16) for n, s in shapes.items()}
    save_file(full_base, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps({"num_attention_heads": HEADS, "num_key_value_heads": KV}))
    full_perturbed = {}
    for n, t in full_base.items():
        full_perturbed[n] = torch.empty_like(t)
        reconstruct_reference_(full_perturbed[n], t, 5, 0.01, n, noise)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    for rank in range(tp):
        monkeypatch.setitem(sys.modules, "vllm.distributed", types.SimpleNamespace(
            get_tensor_model_parallel_rank=lambda: rank, get_tensor_model_parallel_world_size=lambda: tp))
        params = {n: torch.nn.Parameter(t, requires_grad=False) for n, t in vllm_load(full_base, tp, rank).items()}
        worker = RandoptWorkerExtension()
        worker.model_runner = types.SimpleNamespace(model=types.SimpleNamespace(named_parameters=params.items))
        assert worker.randopt_setup(str(tmp_path), noise)["noise"] == noise
        worker.randopt_set(5, 0.01)
        want = vllm_load(full_perturbed, tp, rank)
        for name, p in params.items():
            assert torch.equal(p.data, want[name]), (rank, name)
        worker.randopt_restore()
        loaded = vllm_load(full_base, tp, rank)
        assert all(torch.equal(p.data, loaded[n]) for n, p in params.items())
