"""The fine-tune's outputs: the adapter as peft saves it, and the merged model dir in the checkpoint
dtype, which every engine loads as a base model (W = W0 + (alpha / rank) * B @ A, summed in fp32, then
rounded once to the checkpoint dtype). Each dir is written atomically (randopt/io.py)."""
from __future__ import annotations

from pathlib import Path

from randopt.io import atomic_path
from randopt.model.prepare import combined_sha256, weights_sha256


def write_adapter(peft_model, out: str | Path) -> str:
    """The adapter (adapter_config.json + adapter_model.safetensors); returns its weights' sha256."""
    with atomic_path(out, is_dir=True) as tmp:
        peft_model.save_pretrained(tmp)
    return combined_sha256(weights_sha256(out))


def write_merged(peft_model, tokenizer, checkpoint_dtype, out: str | Path) -> dict[str, str]:
    """The merged model dir (safetensors, config, generation config, tokenizer); returns the sha256 of
    each weight file. peft_model is merged in place: write the adapter first."""
    merged = peft_model.merge_and_unload().to(checkpoint_dtype)
    with atomic_path(out, is_dir=True) as tmp:
        merged.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    return weights_sha256(out)
