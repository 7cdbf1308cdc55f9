"""The engine protocol of docs/design.md ("Engines"): what every engine must do, and nothing more."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np


# The vLLM engine's context length unless its max_context asks for more (randopt/engines/vllm_engine.py);
# rules/common.smk gives score_bpb an engine of its own only for a scoring window that does not fit it.
DEFAULT_MAX_MODEL_LEN = 2048


@dataclass(frozen=True)
class Completion:
    text: str          # the generated text, cut before the first stop string
    n_tokens: int      # tokens generated (up to and including the one that ended it)
    finish: str        # "stop" (stop string or end of sequence) or "length" (hit max_tokens)


@dataclass(frozen=True)
class TextLogprobs:
    logprobs: np.ndarray   # float32 log-probability (nats) of each realized token of the text
    n_bytes: int           # UTF-8 bytes of the text those tokens cover


@runtime_checkable
class Engine(Protocol):
    """Load once; switch weights per seed; generate greedily; score realized tokens."""

    def set_weights(self, seed: int, sigma: float) -> None:
        """Live weights := base + sigma * R(seed), rebuilt from the resident base copy."""

    def restore_base(self) -> None:
        """Live weights := base, exactly."""

    def chat_prompt(self, user_message: str, system: str | None = None,
                    examples: list[tuple[str, str]] = ()) -> str:
        """The model's own chat template around a user message (with optional worked examples)."""

    def generate(self, prompts: list[str], max_tokens: int, stop: list[str]) -> list[Completion]:
        """Greedy completions, one per prompt, in order."""

    def generate_members(self, members: list[tuple[int, float]], prompts: list[str], max_tokens: int,
                         stop: list[str]) -> list[list[Completion]]:
        """generate() for each member of ``members`` ((seed, sigma); BASE for the base), one list of
        completions per member, in order: what switch_weights then generate gives each (up to the kernels'
        near-ties). The torch engine decodes them together (randopt/engines/member_batch.py) and keeps their
        stack for its next call with the same members until a switch; the others go member by member.
        Empty prompts only prepare the members (the stack), so a caller can time that apart. The live
        weights are left at the last member."""

    def token_logprobs(self, texts: list[str], max_context: int | None = None) -> list[TextLogprobs]:
        """Teacher-forced log-probabilities of every token of each text (first token conditioned
        on the tokenizer's start token), with the text's UTF-8 byte count; a text longer than
        max_context tokens (default: the engine's own) is scored in consecutive windows. A per-call
        window lets score_bpb share the search's resident engine (its window is no engine option)."""

    def perturbable_names(self) -> list[str]:
        """Checkpoint names of the tensors a seed perturbs, in a fixed order."""

    def close(self) -> None:
        """Release the engine (processes, GPU memory); the stage CLIs call it before exiting."""

    def read_weights(self) -> dict:
        """The live weights as CPU tensors under the checkpoint's names and shapes (verification)."""


def chat_prompt(tokenizer, user_message: str, system: str | None = None,
                examples: list[tuple[str, str]] = ()) -> str:
    """The tokenizer's own chat template around a user message, with optional worked examples."""
    messages = [{"role": "system", "content": system}] if system else []
    for question, answer in examples:
        messages += [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
    messages.append({"role": "user", "content": user_message})
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def start_token_id(tokenizer, model_bos_id: int | None = None) -> int:
    """The token that conditions a text's first token in teacher forcing: BOS, else EOS."""
    return next(i for i in (tokenizer.bos_token_id, model_bos_id, tokenizer.eos_token_id) if i is not None)


def scoring_windows(token_ids: list[list[int]], start_id: int, max_context: int) -> tuple[list[list[int]], list[int]]:
    """Split each text's tokens into windows of at most max_context tokens, each led by the start
    token, so every token is scored exactly once. Returns (windows, owner text index per window)."""
    windows, owners, span = [], [], max_context - 1
    for owner, ids in enumerate(token_ids):
        for a in range(0, len(ids), span):
            windows.append([start_id] + ids[a:a + span])
            owners.append(owner)
    return windows, owners


def join_windows(texts: list[str], owners: list[int], scored: list[np.ndarray]) -> list[TextLogprobs]:
    """Per-window realized-token log-probs (in window order) back into one array per text."""
    parts: list[list[np.ndarray]] = [[] for _ in texts]
    for owner, lp in zip(owners, scored):
        parts[owner].append(lp)
    return [TextLogprobs(logprobs=np.concatenate(p).astype(np.float32) if p else np.zeros(0, np.float32),
                         n_bytes=len(t.encode("utf-8"))) for t, p in zip(texts, parts)]
