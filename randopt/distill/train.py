"""The fine-tune: a LoRA of the base model (peft) trained with transformers' Trainer on one dataset.

The base is loaded in fp32 (its checkpoint-dtype values widen exactly), the adapter trains in fp32
(the matmuls under bf16 autocast where the engine computes in bf16), and
the loss is on the completion's tokens only (the prompt's labels are -100), ended by the end-of-turn
token so the model learns where an answer stops. Seeded (adapter init, data order, dropout); no
checkpoints are kept: a killed training is rerun whole (docs/distill.md says why).
"""
from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass

import torch

from randopt.distill.lora import check_target_modules, lora_config
from randopt.io import InputError

log = logging.getLogger("randopt")

IGNORE = -100  # the label of a token the loss skips (the prompt, the padding)


@dataclass
class Trained:
    model: object            # the peft model, adapter unmerged
    tokenizer: object
    checkpoint_dtype: torch.dtype
    steps: int
    train_loss: float | None


def tokenize_examples(tokenizer, rows: list[dict], max_length: int) -> list[dict]:
    """prompt + completion + end-of-turn, labels on the completion only. An example over max_length
    loses the start of its prompt (the worked example), never the completion it teaches."""
    examples = []
    for row in rows:
        prompt = tokenizer(row["prompt"], add_special_tokens=False)["input_ids"]
        completion = tokenizer(row["completion"], add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        ids = (prompt + completion)[-max_length:]
        n_prompt = max(0, len(ids) - len(completion))
        examples.append({"input_ids": ids, "attention_mask": [1] * len(ids),
                         "labels": [IGNORE] * n_prompt + ids[n_prompt:]})
    return examples


def train_lora(base_dir: str, rows: list[dict], lora: dict, train: dict, *, device: str = "cpu",
               threads: int | None = None, trust_remote_code: bool = False, bf16: bool = False) -> Trained:
    """Fine-tune a LoRA of the model at base_dir on rows (data.FIELDS); refuses an empty dataset.
    bf16: forward and backward under bf16 autocast (the weights, the adapter and the optimizer stay
    fp32): where the CPU multiplies bf16 natively, a step costs a fraction of fp32's."""
    if not rows:
        raise InputError("distill_train: the dataset is empty; there is nothing to fine-tune on "
                         "(distill_data says how to get correct completions)")
    from peft import get_peft_model
    from transformers import (AutoModelForCausalLM, AutoTokenizer, DataCollatorForSeq2Seq, Trainer,
                              TrainingArguments, set_seed)

    if threads:
        torch.set_num_threads(int(threads))
    set_seed(int(train["seed"]))  # the adapter's initialisation draws from torch's global generator
    tokenizer = AutoTokenizer.from_pretrained(base_dir, local_files_only=True, trust_remote_code=trust_remote_code)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype="auto", local_files_only=True,
                                                 trust_remote_code=trust_remote_code)
    checkpoint_dtype = next(model.parameters()).dtype
    check_target_modules(model, lora["target_modules"])
    model = get_peft_model(model.float(), lora_config(lora))
    examples = tokenize_examples(tokenizer, rows, int(train["max_length"]))
    log.info("fine-tuning a rank-%d LoRA on %d examples (%d tokens, %d trained on), %g epochs",
             lora["rank"], len(examples), sum(len(e["input_ids"]) for e in examples),
             sum(sum(1 for t in e["labels"] if t != IGNORE) for e in examples), train["epochs"])
    with tempfile.TemporaryDirectory(prefix="distill-trainer-") as work:
        args = TrainingArguments(
            output_dir=work, per_device_train_batch_size=int(train["batch_size"]), num_train_epochs=float(train["epochs"]),
            learning_rate=float(train["lr"]), lr_scheduler_type="linear", warmup_steps=0, weight_decay=0.0,
            seed=int(train["seed"]), data_seed=int(train["seed"]), logging_steps=1, save_strategy="no",
            report_to="none", disable_tqdm=True, remove_unused_columns=False, dataloader_num_workers=0,
            use_cpu=device == "cpu" or (device == "auto" and not torch.cuda.is_available()), bf16=bool(bf16))
        trainer = Trainer(model=model, args=args, train_dataset=examples,
                          data_collator=DataCollatorForSeq2Seq(tokenizer, padding=True, label_pad_token_id=IGNORE))
        result = trainer.train()
    model.eval()
    return Trained(model=model, tokenizer=tokenizer, checkpoint_dtype=checkpoint_dtype,
                   steps=int(result.global_step), train_loss=float(result.training_loss))
