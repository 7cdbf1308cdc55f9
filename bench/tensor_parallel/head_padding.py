"""Pad a model's attention with heads that compute nothing, so that tensor parallelism can split it.

vLLM splits attention over tensor-parallel ranks by whole heads, so `tensor_parallel_size` must divide
the query heads and the kv heads. SmolLM2-135M has 9 query heads and 3 kv heads: it runs at TP 1, 3 or
9 only. ``pad_attention_heads(src, dst, 12, 4)`` writes a copy with 12 query and 4 kv heads that
computes the same function (up to floating-point summation order), which vLLM splits over 2 or 4 GPUs.

How (Llama-family attention: Llama, Mistral, Qwen2; q/k/v/o_proj in every layer, optional biases):

- The new heads are appended after the original ones: original query head h keeps rows
  [h*d, (h+1)*d) of q_proj and original kv head j rows [j*d, (j+1)*d) of k_proj/v_proj, where
  d = head_dim. Query head h reads kv head h // g (g = heads / kv heads, kept unchanged), so every
  original query head still reads its original kv head, and the new query heads read only new kv heads.
- New rows of q_proj, k_proj, v_proj (and their biases) are zero, and so are o_proj's new input
  columns. A new head's scores are all 0 (a uniform softmax), its values are 0, and o_proj ignores
  it: it adds exactly nothing. Rotary embeddings act within each head's rows, so they do not mix
  heads; a q/k row permutation some converters apply (GGUF's) is also within a head, so whole-head
  blocks are appended the same way in either layout.
- config.json gets the new num_attention_heads and num_key_value_heads and an explicit head_dim
  (hidden_size no longer equals heads x head_dim; transformers' Llama/Qwen2 and vLLM's Llama/Qwen2
  read head_dim from the config when it is there). Every other tensor (tied embeddings included: a
  checkpoint without lm_head.weight stays without it) and file is copied as it is.

Under randopt's noise the padded model is a different model to perturb: its new rows and columns get
noise too, and o_proj's original elements sit at other row-major indices (its rows are longer), so
W0 + sigma*R(seed) is not SmolLM2's member of the same seed. It is function-equal at the base only.

The output is written atomically (a temporary sibling dir, renamed when complete), with
`randopt_padding.json` saying what was done: source and result sha256s, heads before and after.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from randopt.io import InputError, atomic_path, sha256_file
from randopt.model.prepare import combined_sha256, weights_sha256

PADDING_FILE = "randopt_padding.json"
INDEX_FILE = "model.safetensors.index.json"
MODEL_TYPES = ("llama", "mistral", "qwen2")
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")


def kv_head_of(query_head: int, n_heads: int, n_kv_heads: int) -> int:
    """The kv head a query head reads under grouped-query attention (transformers' repeat_kv and
    vLLM's attention both group consecutive query heads)."""
    return query_head // (n_heads // n_kv_heads)


def plan(config: dict, n_heads: int, n_kv_heads: int) -> dict:
    """Check a padding against a model's config.json; return the shapes it implies."""
    model_type = config.get("model_type")
    if model_type not in MODEL_TYPES:
        raise InputError(f"model_type {model_type!r}: head padding supports {', '.join(MODEL_TYPES)} "
                         "(Llama-family attention with q/k/v/o_proj per layer)")
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    if heads % kv_heads:
        raise InputError(f"the model's {heads} heads are not a multiple of its {kv_heads} kv heads")
    group = heads // kv_heads
    if n_kv_heads < kv_heads or n_heads != n_kv_heads * group:
        raise InputError(f"padding {heads} heads / {kv_heads} kv heads to {n_heads} / {n_kv_heads}: the kv "
                         f"heads can only grow and the group size must stay {group} (heads = {group} x kv heads), "
                         f"e.g. {group * (kv_heads + 1)} / {kv_heads + 1}")
    return {"heads": heads, "kv_heads": kv_heads, "head_dim": head_dim, "group": group,
            "hidden_size": config["hidden_size"], "layers": config["num_hidden_layers"]}


def _pad_rows(tensor, rows: int):
    import torch
    return torch.cat([tensor, tensor.new_zeros((rows,) + tuple(tensor.shape[1:]))], dim=0)


def _pad_tensor(name: str, tensor, p: dict, n_heads: int, n_kv_heads: int):
    """The padded tensor, or the tensor itself when padding does not touch it."""
    import torch
    d = p["head_dim"]
    proj = next((k for k in ("q_proj", "k_proj", "v_proj", "o_proj") if f".self_attn.{k}." in name), None)
    if proj is None:
        return tensor
    heads = p["heads"] if proj in ("q_proj", "o_proj") else p["kv_heads"]
    new = n_heads if proj in ("q_proj", "o_proj") else n_kv_heads
    if proj == "o_proj":
        if name.endswith(".bias"):
            return tensor  # o_proj's bias is per output (hidden) element: no heads in it
        if tuple(tensor.shape) != (p["hidden_size"], heads * d):
            raise InputError(f"{name}: shape {tuple(tensor.shape)}, expected {(p['hidden_size'], heads * d)} "
                             f"for {heads} heads of {d}")
        return torch.cat([tensor, tensor.new_zeros((tensor.shape[0], (new - heads) * d))], dim=1)
    if tensor.shape[0] != heads * d or (tensor.dim() == 2 and tensor.shape[1] != p["hidden_size"]):
        raise InputError(f"{name}: shape {tuple(tensor.shape)}, expected {heads * d} rows ({heads} heads of {d})")
    return _pad_rows(tensor, (new - heads) * d)


def pad_attention_heads(src_dir: str | Path, dst_dir: str | Path, n_heads: int, n_kv_heads: int) -> dict:
    """Write src_dir's model with n_heads query heads and n_kv_heads kv heads to dst_dir (the new
    heads zero, appended after the original ones); return what randopt_padding.json records.

    dst_dir must not exist, or be an earlier output of this function (it is then replaced)."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    src, dst = Path(src_dir), Path(dst_dir)
    if not (src / "config.json").is_file():
        raise InputError(f"{src}: no model here (config.json missing); give a Hugging Face model dir")
    if dst.resolve() == src.resolve():
        raise InputError(f"{dst} is the source model dir; write the padded model to a new directory")
    if dst.exists() and not (dst / PADDING_FILE).is_file():
        raise InputError(f"{dst} exists and is not a padded model ({PADDING_FILE} missing); remove it or "
                         "choose another directory")
    config = json.loads((src / "config.json").read_text())
    p = plan(config, n_heads, n_kv_heads)
    weight_files = sorted(f for f in src.iterdir() if f.suffix in WEIGHT_SUFFIXES)
    if not weight_files or any(f.suffix != ".safetensors" for f in weight_files):
        raise InputError(f"{src}: head padding reads safetensors checkpoints; found "
                         f"{[f.name for f in weight_files] or 'no weight files'}")
    attention = {f"model.layers.{i}.self_attn.{k}_proj.weight" for i in range(p["layers"]) for k in "qkvo"}
    padded, total_size = [], 0
    with atomic_path(dst, is_dir=True) as tmp:
        for source in weight_files:
            tensors = {}
            with safe_open(source, framework="pt") as f:
                metadata = f.metadata()
                for name in f.keys():
                    tensor = f.get_tensor(name)
                    tensors[name] = _pad_tensor(name, tensor, p, n_heads, n_kv_heads).contiguous()
                    total_size += tensors[name].numel() * tensors[name].element_size()
                    if tensors[name].shape != tensor.shape:
                        padded.append(name)
            save_file(tensors, str(tmp / source.name), metadata=metadata or {"format": "pt"})
            (tmp / source.name).chmod(0o644)  # a model dir is read by other users and jobs
        missing = sorted(attention - set(padded))
        if missing:
            raise InputError(f"{src}: attention tensors not found under their Llama names: {missing[:4]}"
                             f"{' ...' if len(missing) > 4 else ''}")
        for extra in src.iterdir():
            if (extra.suffix in WEIGHT_SUFFIXES or extra.name in ("config.json", INDEX_FILE, PADDING_FILE)
                    or extra.is_dir() or extra.name.startswith(".")):  # e.g. Snakemake's .snakemake_timestamp
                continue
            shutil.copy2(extra, tmp / extra.name)
        if (src / INDEX_FILE).is_file():
            index = json.loads((src / INDEX_FILE).read_text())
            index.setdefault("metadata", {})["total_size"] = total_size
            (tmp / INDEX_FILE).write_text(json.dumps(index, indent=2) + "\n")
        new_config = config | {"num_attention_heads": n_heads, "num_key_value_heads": n_kv_heads,
                               "head_dim": p["head_dim"]}
        (tmp / "config.json").write_text(json.dumps(new_config, indent=2) + "\n")
        per_file = {f.name: sha256_file(f) for f in sorted(tmp.glob("*.safetensors"))}
        record = {
            "source_model_dir": str(src), "source_sha256": combined_sha256(weights_sha256(src)),
            "heads": [p["heads"], n_heads], "kv_heads": [p["kv_heads"], n_kv_heads], "head_dim": p["head_dim"],
            "group": p["group"], "added_query_heads": list(range(p["heads"], n_heads)),
            "added_kv_heads": list(range(p["kv_heads"], n_kv_heads)), "padded_tensors": len(padded),
            "weights_sha256": per_file, "sha256": combined_sha256(per_file),
        }
        (tmp / PADDING_FILE).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    return record

