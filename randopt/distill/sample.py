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

import numpy as np
import torch

from randopt.engines.base import Completion
from randopt.engines.torch_engine import finish_completion


def sample_completions(engine, prompts: list[str], *, n: int, temperature: float, seed: int, max_tokens: int,
                       stop: list[str]) -> list[list[Completion]]:
    """n sampled completions of each prompt (plain sampling: no top-k, no top-p), from the job's own torch
    engine (torch_samples) or vLLM engine (vllm_samples)."""
    sampler = vllm_samples if hasattr(engine, "llm") else torch_samples if hasattr(engine, "model") else None
    if sampler is None:
        raise TypeError(f"{type(engine).__name__}: the control is sampled from a torch or vLLM engine loaded in this "
                        "job (not a resident one)")
    return sampler(engine, prompts, n=n, temperature=temperature, seed=seed, max_tokens=max_tokens, stop=stop)


@torch.inference_mode()
def torch_samples(engine, prompts: list[str], *, n: int, temperature: float, seed: int, max_tokens: int,
                  stop: list[str]) -> list[list[Completion]]:
    """From a torch engine: batch b of the rows (prompt-major: prompt 0's n copies first) draws under the
    seed (seed, b), so a rerun with the same prompts, n and engine.batch_size (in the evaluation key) draws
    the same."""
    model, tokenizer = engine.model, engine.tokenizer
    end_ids = engine.end_ids()
    rows = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts for _ in range(n)]
    texts: list[Completion] = []
    for b, start in enumerate(range(0, len(rows), engine.batch_size)):
        torch.manual_seed(int(np.random.SeedSequence([seed, b]).generate_state(1)[0]))
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
                 stop: list[str]) -> list[list[Completion]]:
    """n sampled completions of each prompt from a vLLM engine (randopt/engines/vllm_engine.py), plain
    sampling (vLLM's defaults: no top-k, top-p 1), prompt i's under prompt_seed(seed, i)."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    params = [SamplingParams(n=n, temperature=float(temperature), seed=prompt_seed(seed, i), max_tokens=max_tokens,
                             stop=list(stop) or None, skip_special_tokens=True) for i in range(len(prompts))]
    outputs = engine.llm.generate([TokensPrompt(prompt_token_ids=ids) for ids in engine._tokens(prompts)], params,
                                  use_tqdm=False)
    return [[Completion(text=c.text, n_tokens=len(c.token_ids), finish="length" if c.finish_reason == "length" else "stop")
             for c in out.outputs] for out in outputs]
