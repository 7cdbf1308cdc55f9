"""The engine protocol of DESIGN.md §5: what every engine must do, and nothing more."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np


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

    def token_logprobs(self, texts: list[str]) -> list[TextLogprobs]:
        """Teacher-forced log-probabilities of every token of each text (first token conditioned
        on the tokenizer's start token), with the text's UTF-8 byte count."""

    def perturbable_names(self) -> list[str]:
        """Checkpoint names of the tensors a seed perturbs, in a fixed order."""
