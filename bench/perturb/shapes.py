"""The checkpoint tensors of a Llama-style decoder (Qwen2, SmolLM2), by name and shape, for the
perturbation benchmarks (bench_perturb_cpu.py, bench_perturb_h200.py): the sets whose switch they time."""
from __future__ import annotations


def decoder_shapes(hidden: int, inter: int, layers: int, heads: int, kv: int, hd: int, vocab: int, *,
                   qkv_bias: bool = False, tied: bool = True) -> dict[str, tuple[int, ...]]:
    """name -> shape: the embedding, each layer's norms, q/k/v (with biases if qkv_bias), o, the gated
    MLP, the final norm, and lm_head unless tied to the embedding."""
    s = {"model.embed_tokens.weight": (vocab, hidden)}
    for i in range(layers):
        p = f"model.layers.{i}."
        s[p + "input_layernorm.weight"] = (hidden,)
        for proj, rows in (("q_proj", heads * hd), ("k_proj", kv * hd), ("v_proj", kv * hd)):
            s[p + f"self_attn.{proj}.weight"] = (rows, hidden)
            if qkv_bias:
                s[p + f"self_attn.{proj}.bias"] = (rows,)
        s[p + "self_attn.o_proj.weight"] = (hidden, heads * hd)
        s[p + "post_attention_layernorm.weight"] = (hidden,)
        s[p + "mlp.gate_proj.weight"] = (inter, hidden)
        s[p + "mlp.up_proj.weight"] = (inter, hidden)
        s[p + "mlp.down_proj.weight"] = (hidden, inter)
    s["model.norm.weight"] = (hidden,)
    if not tied:
        s["lm_head.weight"] = (vocab, hidden)
    return s
