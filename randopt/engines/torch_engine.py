"""The torch/transformers engine: the embedded default (CPU) and a plain CUDA path.

Weights live in the checkpoint dtype. A resident base copy (2x weight memory) makes every seed an
absolute rebuild through randopt.perturb, so the live weights for a seed never depend on which seeds
came before, and restore is an exact copy.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from randopt import perturb
from randopt.engines.base import (Completion, TextLogprobs, chat_prompt, join_windows, scoring_windows,
                                  start_token_id)


def _pick_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


class TorchEngine:
    def __init__(self, model_dir: str, *, device: str = "auto", batch_size: int = 32,
                 threads: int | None = None, trust_remote_code: bool = False, max_context: int = 1024):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model_path = Path(model_dir)
        if not (model_path / "config.json").is_file():
            raise FileNotFoundError(f"{model_dir}: no model here (config.json missing); run prepare_model "
                                    "or point model.path at a Hugging Face model directory")
        if threads:
            torch.set_num_threads(int(threads))
        self.device = _pick_device(device)
        self.batch_size = int(batch_size)
        self.max_context = int(max_context)
        self.tokenizer = AutoTokenizer.from_pretrained(model_path, local_files_only=True,
                                                       trust_remote_code=trust_remote_code)
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = AutoModelForCausalLM.from_pretrained(
            model_path, dtype="auto", local_files_only=True, trust_remote_code=trust_remote_code,
        ).to(self.device).eval()
        # named_parameters() lists a tied tensor once, under its checkpoint name (embed_tokens):
        # one logical tensor, one noise, shared storage for both uses.
        self._live = {name: p.data for name, p in self.model.named_parameters()}
        self._base = {name: t.detach().clone() for name, t in self._live.items()}
        # Built once: on CUDA it captures a whole switch as one graph replay (kernels/README.md).
        self._perturber = perturb.Perturber(self._live, self._base)
        self._start_id = start_token_id(self.tokenizer, self.model.config.bos_token_id)

    # -- weights ---------------------------------------------------------------------------------
    def close(self) -> None:
        """Nothing to stop: the model lives in this process and goes with it."""

    def perturbable_names(self) -> list[str]:
        return list(self._live)

    def set_weights(self, seed: int, sigma: float) -> None:
        self._perturber.reconstruct_(seed, sigma)

    def restore_base(self) -> None:
        self._perturber.restore_()

    def live_tensor(self, name: str) -> torch.Tensor:
        return self._live[name]

    def read_weights(self) -> dict[str, torch.Tensor]:
        return {name: t.detach().cpu().clone() for name, t in self._live.items()}

    # -- prompts ---------------------------------------------------------------------------------
    def chat_prompt(self, user_message: str, system: str | None = None,
                    examples: list[tuple[str, str]] = ()) -> str:
        return chat_prompt(self.tokenizer, user_message, system, examples)

    # -- generation ------------------------------------------------------------------------------
    @torch.inference_mode()
    def generate(self, prompts: list[str], max_tokens: int, stop: list[str]) -> list[Completion]:
        out: list[Completion] = []
        for start in range(0, len(prompts), self.batch_size):
            out += self._generate_batch(prompts[start:start + self.batch_size], max_tokens, list(stop))
        return out

    def _generate_batch(self, prompts: list[str], max_tokens: int, stop: list[str]) -> list[Completion]:
        tok = self.tokenizer
        enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(self.device)
        generated = self.model.generate(
            **enc, max_new_tokens=max_tokens, do_sample=False, temperature=None, top_p=None, top_k=None,
            stop_strings=stop or None, tokenizer=tok if stop else None, pad_token_id=tok.pad_token_id,
        )
        new_tokens = generated[:, enc["input_ids"].shape[1]:].tolist()
        end_ids = {tok.eos_token_id, tok.pad_token_id} | set(np.atleast_1d(self.model.generation_config.eos_token_id or []).tolist())
        results = []
        for ids in new_tokens:
            n = next((i + 1 for i, t in enumerate(ids) if t in end_ids), None)
            ended_by_eos = n is not None
            ids = ids[:n] if ended_by_eos else ids
            text = tok.decode(ids, skip_special_tokens=True)
            cut = min((p for p in (text.find(s) for s in stop) if p >= 0), default=-1)
            if cut >= 0:
                text = text[:cut]
            finish = "stop" if (ended_by_eos or cut >= 0) else "length"
            results.append(Completion(text=text, n_tokens=len(ids), finish=finish))
        return results

    # -- teacher forcing -------------------------------------------------------------------------
    @torch.inference_mode()
    def token_logprobs(self, texts: list[str]) -> list[TextLogprobs]:
        token_ids = [self.tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
        windows, owners = scoring_windows(token_ids, self._start_id, self.max_context)
        scored: list[np.ndarray | None] = [None] * len(windows)
        order = sorted(range(len(windows)), key=lambda i: -len(windows[i]))  # less padding per batch
        for b in range(0, len(order), self.batch_size):
            batch = [windows[i] for i in order[b:b + self.batch_size]]
            width = max(map(len, batch))
            ids = torch.full((len(batch), width), self.tokenizer.pad_token_id, dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for r, w in enumerate(batch):  # right padding: positions stay 0..len-1
                ids[r, :len(w)] = torch.tensor(w)
                mask[r, :len(w)] = 1
            logits = self.model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device)).logits
            logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
            realized = logp.gather(-1, ids[:, 1:].to(self.device).unsqueeze(-1)).squeeze(-1).cpu()
            for r, i in enumerate(order[b:b + self.batch_size]):
                scored[i] = realized[r, :len(batch[r]) - 1].numpy()
        return join_windows(texts, owners, scored)
