"""The LoRA adapter: its peft config from the config's distill.lora block, and the check that every
target module is one the model has (a typo would otherwise train nothing, or fail deep inside peft)."""
from __future__ import annotations

import json
from pathlib import Path

from randopt.io import InputError


def linear_module_names(model) -> set[str]:
    """The last name part of every linear layer of a model (q_proj, down_proj, ...): what peft's
    target_modules match."""
    import torch
    return {name.rsplit(".", 1)[-1] for name, module in model.named_modules() if isinstance(module, torch.nn.Linear)}


def check_target_modules(model, targets, where: str = "config key 'distill.lora.target_modules'") -> None:
    """Every target names a linear layer of the model (the output head excepted: tied to the embeddings
    in small models, it is no adapter's place), else an error naming the ones it has."""
    have = linear_module_names(model) - {"lm_head"}
    missing = sorted(set(targets) - have)
    if missing:
        raise InputError(f"{where}: the model has no linear module named {missing}; it has {sorted(have)}")


def check_model_dir(model_dir: str | Path, targets) -> None:
    """check_target_modules from a model dir's config.json alone (the model built on the meta device:
    no weights read), for the check at DAG build. Silent when the dir is not there yet (the training
    stage checks again on the loaded model)."""
    config_path = Path(model_dir) / "config.json"
    if not config_path.is_file():
        return
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    try:
        json.loads(config_path.read_text())
    except json.JSONDecodeError as err:
        raise InputError(f"{config_path}: not valid JSON ({err})") from err
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_dir, local_files_only=True))
    check_target_modules(model, targets)


def lora_config(lora: dict):
    """peft's LoraConfig for the config's distill.lora block."""
    from peft import LoraConfig
    return LoraConfig(r=int(lora["rank"]), lora_alpha=lora["alpha"], target_modules=list(lora["target_modules"]),
                      lora_dropout=float(lora["dropout"]), bias="none", task_type="CAUSAL_LM")


def scale(lora: dict) -> float:
    """The factor of B @ A in the merged weight (peft's scaling, without rsLoRA): alpha / rank."""
    return lora["alpha"] / lora["rank"]
