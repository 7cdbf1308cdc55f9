"""The vLLM parameter -> checkpoint tensor mapping, on the shapes vLLM gives a Qwen2 model."""
import pytest
import torch

from kernels.layout import as_2d
from kernels.noise_ref import reconstruct_reference_
from randopt import perturb
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


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_every_rank_perturbs_exactly_the_reference_elements(tp):
    shapes = checkpoint()
    torch.manual_seed(0)
    full_base = {n: torch.randn(s).to(torch.bfloat16) for n, s in shapes.items()}
    expected = {}
    for n, t in full_base.items():
        expected[n] = torch.empty_like(t)
        reconstruct_reference_(expected[n], t, 5, 0.01, n)
    assembled = {n: torch.zeros_like(t) for n, t in full_base.items()}
    for rank in range(tp):
        layouts = model_layouts(vllm_shapes(tp), shapes, (HEADS, KV), tp, rank)
        live, base = {}, {}
        for key, lay in layouts.items():  # build this rank's local base from the full checkpoint
            local = torch.zeros(lay.shape, dtype=torch.bfloat16)
            for b in lay.blocks:
                ncols = b.ncols if b.ncols is not None else as_2d(lay.shape)[1]
                local.view(*as_2d(lay.shape))[b.local_row:b.local_row + b.nrows, b.local_col:b.local_col + ncols] = \
                    full_base[b.name].view(*as_2d(b.logical_shape))[b.logical_row:b.logical_row + b.nrows,
                                                                    b.logical_col:b.logical_col + ncols]
            base[key], live[key] = local, local.clone()
        perturb.reconstruct_local_(live, base, 5, 0.01, layouts)
        for key, lay in layouts.items():
            for b in lay.blocks:
                ncols = b.ncols if b.ncols is not None else as_2d(lay.shape)[1]
                assembled[b.name].view(*as_2d(b.logical_shape))[b.logical_row:b.logical_row + b.nrows,
                                                               b.logical_col:b.logical_col + ncols] = \
                    live[key].view(*as_2d(lay.shape))[b.local_row:b.local_row + b.nrows, b.local_col:b.local_col + ncols]
    for name in shapes:
        assert torch.equal(assembled[name], expected[name]), name


def test_a_shape_vllm_does_not_have_is_a_clear_error():
    with pytest.raises(ValueError, match="does not match the layout"):
        layout_for("model.layers.0.mlp.gate_up_proj.weight", (7, HIDDEN), checkpoint(), (HEADS, KV), 1, 0)


def test_a_checkpoint_tensor_left_out_is_an_error():
    named = vllm_shapes(1)
    del named["model.layers.1.mlp.down_proj.weight"]
    with pytest.raises(ValueError, match="no vLLM parameter"):
        model_layouts(named, checkpoint(), (HEADS, KV), 1, 0)
