"""Where each parameter of a vLLM model sits in the checkpoint's logical tensors.

vLLM fuses q/k/v into ``qkv_proj`` and gate/up into ``gate_up_proj``, shards linear layers over
tensor-parallel ranks and pads the vocabulary. The noise is defined on the checkpoint's own tensors
(randopt/kernels/noise_ref.py), so every vLLM parameter gets a kernels.layout.LocalLayout that maps its local
elements back to (logical name, index). Pure functions of names and shapes: tested on the CPU.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from randopt.kernels import layout as L


def checkpoint_shapes(model_dir: str | Path) -> dict[str, tuple[int, ...]]:
    """Logical tensor names and shapes, read from the safetensors headers (no weights loaded); a shape
    model's from its config (randopt/model/shape.py)."""
    from safetensors import safe_open

    from randopt.model import shape
    if shape.read_marker(model_dir):
        return shape.parameter_shapes(shape.model_config(model_dir))
    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{model_dir}: no *.safetensors files; the vLLM engine needs safetensors weights")
    shapes = {}
    for path in files:
        with safe_open(str(path), framework="pt") as fh:
            for name in fh.keys():
                shapes[name] = tuple(fh.get_slice(name).get_shape())
    return shapes


def attention_heads(model_dir: str | Path) -> tuple[int, int]:
    config = json.loads((Path(model_dir) / "config.json").read_text())
    heads = config["num_attention_heads"]
    return heads, config.get("num_key_value_heads", heads)


ROW_PARALLEL = ("o_proj", "down_proj")
VOCAB = ("embed_tokens", "lm_head")


def layout_for(name: str, local_shape: tuple[int, ...], shapes: Mapping[str, tuple[int, ...]],
               heads: tuple[int, int], tp: int, rank: int, vocab_padding: int = 64) -> L.LocalLayout:
    """The layout of one vLLM parameter, checked against its real local shape."""
    def logical(n: str) -> tuple[str, tuple[int, ...]]:
        if n not in shapes:
            raise KeyError(f"vLLM parameter {name}: expected checkpoint tensor {n} is not in the checkpoint")
        return n, shapes[n]

    if ".qkv_proj." in name:
        q, k, v = (logical(name.replace(".qkv_proj.", f".{p}_proj.")) for p in "qkv")
        lay = L.qkv_parallel(q, k, v, heads[0], heads[1], tp, rank)
    elif ".gate_up_proj." in name:
        lay = L.merged_column_parallel([logical(name.replace(".gate_up_proj.", f".{p}_proj."))
                                        for p in ("gate", "up")], tp, rank)
    elif any(f".{part}." in f".{name}" for part in VOCAB):
        lay = L.vocab_parallel(*logical(name), tp, rank, padding=vocab_padding)
    elif any(f".{part}." in name for part in ROW_PARALLEL):
        lay = L.row_parallel(*logical(name), tp, rank)
    else:
        n, shape = logical(name)
        if tuple(local_shape) == tuple(shape):
            lay = L.replicated(n, shape)
        else:  # any other sharded linear is column-parallel in vLLM's Llama/Qwen2 family
            lay = L.column_parallel(n, shape, tp, rank)
    if tuple(lay.shape) != tuple(local_shape):
        raise ValueError(f"vLLM parameter {name}: local shape {tuple(local_shape)} does not match the layout "
                         f"{tuple(lay.shape)} derived for tp={tp}; this architecture needs a mapping in "
                         f"randopt/engines/vllm_layouts.py")
    return lay


def model_layouts(named_shapes: Mapping[str, tuple[int, ...]], shapes: Mapping[str, tuple[int, ...]],
                  heads: tuple[int, int], tp: int, rank: int) -> dict[str, L.LocalLayout]:
    """Layouts of every perturbable vLLM parameter, and a check that together they cover each
    checkpoint tensor exactly once per rank's share (no tensor left unperturbed by mistake)."""
    layouts = {name: layout_for(name, shape, shapes, heads, tp, rank) for name, shape in named_shapes.items()}
    covered = {b.name for lay in layouts.values() for b in lay.blocks}
    tied = {"lm_head.weight"} if "lm_head.weight" not in covered else set()
    missing = sorted(set(shapes) - covered - tied)
    if missing:
        raise ValueError(f"checkpoint tensors with no vLLM parameter to perturb: {missing[:5]}"
                         f"{' ...' if len(missing) > 5 else ''}")
    return layouts
