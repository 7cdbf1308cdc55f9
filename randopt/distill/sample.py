"""The control's completions: the base model sampled at a set temperature and seed.

The engines decode greedily (every answer of the search is greedy), so sampling is done here, from the
same prompts, with the engine's own loaded model:
- the torch engine's model and tokenizer, batched as the engine batches: every prompt's n copies in rows
  of engine.batch_size, the prompts' common prefix (system line, worked example) computed once per batch
  by the engine's own input builder, and each answer ended and cut as the engine ends and cuts its own
  (torch_engine.finish_completion);
- the vLLM engine's LLM and its sampler: each prompt's n samples in one request with a seed of its own,
  (seed, prompt index), so a draw does not depend on the requests it was batched with. vLLM stops and
  cuts answers as the engine's generate does (stop strings, end of sequence, special tokens skipped).
"""
from __future__ import annotations

import math

import numpy as np
import torch

from randopt.engines.base import Completion
from randopt.engines.torch_engine import finish_completion


def sample_completions(engine, prompts: list[str], *, n: int, temperature: float, seed: int, max_tokens: int,
                       stop: list[str], first_prompt: int = 0) -> list[list[Completion]]:
    """n sampled completions of each prompt (plain sampling: no top-k, no top-p), from the job's own torch
    engine (torch_samples) or vLLM engine (vllm_samples). first_prompt: the index of prompts[0] in the whole
    list the seed draws for, so that the list sampled in pieces draws what it draws in one call (a torch
    engine's piece must start on a batch: first_prompt * n a multiple of its batch_size; piece_alignment)."""
    sampler = vllm_samples if hasattr(engine, "llm") else torch_samples if hasattr(engine, "model") else None
    if sampler is None:
        raise TypeError(f"{type(engine).__name__}: the control is sampled from a torch or vLLM engine loaded in this "
                        "job (not a resident one)")
    return sampler(engine, prompts, n=n, temperature=temperature, seed=seed, max_tokens=max_tokens, stop=stop,
                   first_prompt=first_prompt)


def piece_alignment(engine, n: int) -> int:
    """The prompts a piece of sample_completions' list must be a multiple of, to draw what the whole list
    draws: a torch engine seeds each batch of rows (n a prompt), a vLLM engine each prompt."""
    if not hasattr(engine, "llm") and hasattr(engine, "model"):
        return engine.batch_size // math.gcd(engine.batch_size, n)
    return 1


@torch.inference_mode()
def torch_samples(engine, prompts: list[str], *, n: int, temperature: float, seed: int, max_tokens: int,
                  stop: list[str], first_prompt: int = 0) -> list[list[Completion]]:
    """From a torch engine: batch b of the rows (prompt-major: prompt 0's n copies first) draws under the
    seed (seed, b), so a rerun with the same prompts, n and engine.batch_size (in the evaluation key) draws
    the same."""
    model, tokenizer = engine.model, engine.tokenizer
    if first_prompt * n % engine.batch_size:
        raise ValueError(f"a piece of the prompts starting at prompt {first_prompt} ({n} samples each) does not start on "
                         f"a batch of {engine.batch_size} rows; cut pieces at multiples of piece_alignment()")
    first_batch = first_prompt * n // engine.batch_size
    end_ids = engine.end_ids()
    rows = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts for _ in range(n)]
    texts: list[Completion] = []
    for b, start in enumerate(range(0, len(rows), engine.batch_size)):
        torch.manual_seed(int(np.random.SeedSequence([seed, first_batch + b]).generate_state(1)[0]))
        # the engine's prefix-shared, left-padded inputs (TorchEngine._shared_prefix_inputs): the same
        # prompts cost what the search's greedy batches cost
        inputs = engine._shared_prefix_inputs(rows[start:start + engine.batch_size])
        generated = model.generate(
            **inputs, max_new_tokens=max_tokens, do_sample=True, temperature=float(temperature), top_k=0, top_p=1.0,
            stop_strings=stop or None, tokenizer=tokenizer if stop else None, pad_token_id=tokenizer.pad_token_id)
        texts += [finish_completion(tokenizer, r, end_ids, stop) for r in generated[:, inputs["input_ids"].shape[1]:].tolist()]
    return [texts[i * n:(i + 1) * n] for i in range(len(prompts))]


def prompt_seed(seed: int, index: int) -> int:
    """The seed of prompt index's samples: (seed, index) spread over 32 bits."""
    return int(np.random.SeedSequence([seed, index]).generate_state(1)[0])


def vllm_samples(engine, prompts: list[str], *, n: int, temperature: float, seed: int, max_tokens: int,
                 stop: list[str], first_prompt: int = 0) -> list[list[Completion]]:
    """n sampled completions of each prompt from a vLLM engine (randopt/engines/vllm_engine.py), plain
    sampling (vLLM's defaults: no top-k, top-p 1), prompt i's under prompt_seed(seed, i)."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    params = [SamplingParams(n=n, temperature=float(temperature), seed=prompt_seed(seed, first_prompt + i), max_tokens=max_tokens,
                             stop=list(stop) or None, skip_special_tokens=True) for i in range(len(prompts))]
    outputs = engine.llm.generate([TokensPrompt(prompt_token_ids=ids) for ids in engine._tokens(prompts)], params,
                                  use_tqdm=False)
    return [[Completion(text=c.text, n_tokens=len(c.token_ids), finish="length" if c.finish_reason == "length" else "stop")
             for c in out.outputs] for out in outputs]
