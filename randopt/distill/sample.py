"""The control's completions: the base model sampled at a set temperature and seed.

The engines decode greedily (every answer of the search is greedy), so sampling is done here, with the
torch engine's loaded model and tokenizer, from the same prompts, batched as the engine batches: every
prompt's n copies in rows of engine.batch_size, the prompts' common prefix (system line, worked
example) computed once per batch by the engine's own input builder. Post-processing (end at the
end-of-turn token, cut at the first stop string) is the torch engine's; it is restated here rather than
shared, because an edit to randopt/engines/torch_engine.py would change the evaluation key of every
run, distilled or not.
"""
from __future__ import annotations

import numpy as np
import torch

from randopt.engines.base import Completion


def finish_completion(tokenizer, ids: list[int], end_ids: set, stop: list[str]) -> Completion:
    """Generated ids -> the completion as the torch engine reports one."""
    n = next((i + 1 for i, t in enumerate(ids) if t in end_ids), None)
    ids = ids[:n] if n is not None else ids
    text = tokenizer.decode(ids, skip_special_tokens=True)
    cut = min((p for p in (text.find(s) for s in stop) if p >= 0), default=-1)
    if cut >= 0:
        text = text[:cut]
    return Completion(text=text, n_tokens=len(ids), finish="stop" if (n is not None or cut >= 0) else "length")


@torch.inference_mode()
def sample_completions(engine, prompts: list[str], *, n: int, temperature: float, seed: int, max_tokens: int,
                       stop: list[str]) -> list[list[Completion]]:
    """n sampled completions of each prompt (plain sampling: no top-k, no top-p), from a torch engine.
    Batch b of the rows (prompt-major: prompt 0's n copies first) draws under the seed (seed, b), so a
    rerun with the same prompts, n and engine.batch_size (in the evaluation key) draws the same."""
    model, tokenizer = engine.model, engine.tokenizer
    end_ids = {tokenizer.eos_token_id, tokenizer.pad_token_id} | set(
        np.atleast_1d(model.generation_config.eos_token_id or []).tolist())
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
