"""A model made from its shape (model.source: shape): a config.json and a tokenizer, no weight files.

The time of a run depends on the model's shape, not on its values, and a random-weight model answers
to max_tokens: the worst case, so an upper bound on a real model's time. The torch engine builds the
weights with an explicit seeded init (init_weights); vLLM builds them with its dummy load format
(docs/gpu.md says how its values are drawn). Nothing such a model answers is a result: the record, its
RECORDS.md row and the figures say NOT_A_RESULT.

prepare_model writes its dir (randopt/model/prepare.py write_shape_dir). Known names (KNOWN) are written out from the hub's config.json of each model (the fields that make
its shape, and the rest of the file as published); any other value is a path to a config.json.
The model's identity is (sha256 of the canonical config, dtype, init seed): shape_identity.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from randopt.io import InputError

NOT_A_RESULT = "shape model: accuracy is not a result"
MARKER = "randopt_shape.json"   # in a shape model's dir: what it is and how its weights are made

_QWEN2 = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "attention_dropout": 0.0,
          "bos_token_id": 151643, "eos_token_id": 151645, "hidden_act": "silu", "initializer_range": 0.02,
          "max_position_embeddings": 32768, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
          "sliding_window": 131072, "use_sliding_window": False, "tie_word_embeddings": False,
          "use_cache": True, "vocab_size": 152064}
KNOWN = {
    # Qwen/Qwen2.5-7B-Instruct config.json: 7.6 B parameters
    "qwen2.5-7b": _QWEN2 | {"hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
                            "num_attention_heads": 28, "num_key_value_heads": 4, "max_window_layers": 28},
    # Qwen/Qwen2.5-72B-Instruct config.json: 72.7 B parameters (the standard's model)
    "qwen2.5-72b": _QWEN2 | {"hidden_size": 8192, "intermediate_size": 29568, "num_hidden_layers": 80,
                             "num_attention_heads": 64, "num_key_value_heads": 8, "max_window_layers": 80},
    # for tests: the Qwen2 architecture at a size a CPU runs in seconds (SmolLM2's 49,152-token vocabulary)
    "tiny-qwen2": _QWEN2 | {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                            "num_attention_heads": 4, "num_key_value_heads": 2, "max_window_layers": 2,
                            "vocab_size": 49152, "bos_token_id": 1, "eos_token_id": 2,
                            "max_position_embeddings": 2048},
}


def resolve_config(name_or_path: str) -> dict:
    """The config.json a known name stands for, or the file at a path; a clear error otherwise."""
    if name_or_path in KNOWN:
        return dict(KNOWN[name_or_path])
    path = Path(name_or_path)
    if not path.is_file():
        raise InputError(f"model.config '{name_or_path}' is neither a known shape ({', '.join(KNOWN)}) nor a "
                         f"config.json file; give one of those names or the path of a Hugging Face config.json")
    try:
        config = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise InputError(f"model.config {path}: not valid JSON ({err})") from None
    if not isinstance(config, dict) or "model_type" not in config:
        raise InputError(f"model.config {path}: not a Hugging Face config.json (no model_type)")
    return config


def shape_weights(engine_kind: str) -> str:
    """How an engine makes a shape model's weights (for the record)."""
    if engine_kind == "vllm":
        return ("vLLM's dummy load format: every floating tensor uniform in [-1e-3, 1e-3] from a generator seeded "
                "1234 per tensor, the same in every run (init_seed unused; docs/gpu.md)")
    return "torch engine: norms 1, biases 0, the rest N(0, initializer_range) from init_seed (randopt/model/shape.py)"


def canonical(config: dict) -> str:
    return json.dumps(config, sort_keys=True, separators=(",", ":"))


def shape_identity(config: dict, dtype: str, init_seed: int) -> dict:
    """What a shape model is: its config's sha256, its dtype and its init seed (and their sha256)."""
    ident = {"config_sha256": hashlib.sha256(canonical(config).encode()).hexdigest(), "dtype": dtype,
             "init_seed": int(init_seed)}
    return ident | {"sha256": hashlib.sha256(canonical(ident).encode()).hexdigest()}


def _hf_config(config: dict):
    from transformers import AutoConfig
    config = dict(config)
    return AutoConfig.for_model(config.pop("model_type"), **config)


def parameter_shapes(config: dict) -> dict[str, tuple[int, ...]]:
    """The checkpoint's tensor names and shapes (a tied tensor once, as a checkpoint stores it), from a
    model built on the meta device: no memory, seconds even for 72B."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(_hf_config(config))
    return {name: tuple(p.shape) for name, p in model.named_parameters()}


# Bytes of an element in each model.dtype the schema allows (config/schema.yaml model.dtype).
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


def weight_bytes(config: dict, dtype: str) -> int:
    """The bytes of the model's weights in dtype (what its safetensors files would hold)."""
    import math
    return sum(math.prod(s) for s in parameter_shapes(config).values()) * DTYPE_BYTES[dtype]


def read_marker(model_dir: str | Path) -> dict | None:
    """A shape model dir's marker, or None for a model with weight files."""
    path = Path(model_dir) / MARKER
    return json.loads(path.read_text()) if path.is_file() else None


def model_config(model_dir: str | Path) -> dict:
    """A shape model dir's config.json, less what prepare_model added (its dtype)."""
    config = json.loads((Path(model_dir) / "config.json").read_text())
    config.pop("torch_dtype", None)
    return config


def init_weights(model, seed: int, initializer_range: float) -> None:
    """The torch engine's weights of a shape model, explicit and seeded: one generator seeded with
    `seed`, parameters in name order; a norm's weight 1, a bias 0, any other tensor N(0,
    initializer_range) drawn in float32 on the CPU and rounded to the parameter's dtype. Independent of
    transformers' own init (its order and defaults can change between versions)."""
    import torch

    gen = torch.Generator().manual_seed(int(seed))
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if name.endswith(".bias"):
                p.zero_()
            elif p.dim() == 1 and "norm" in name:
                p.fill_(1.0)
            else:
                p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float32).mul_(initializer_range))


def build_torch_model(model_dir: str | Path, trust_remote_code: bool = False):
    """The torch engine's model of a shape dir: from its config, in its dtype, seeded by its marker."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    marker = read_marker(model_dir)
    config = AutoConfig.from_pretrained(model_dir, local_files_only=True, trust_remote_code=trust_remote_code)
    model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, marker["dtype"]),
                                             trust_remote_code=trust_remote_code)
    init_weights(model, marker["init_seed"], getattr(config, "initializer_range", 0.02))
    return model
