"""The control's completions: the base model sampled at a set temperature and seed.

The engines decode greedily (every answer of the search is greedy), so sampling is done here, with the
torch engine's own loaded model and tokenizer, from the same prompts. Post-processing (end at the
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
def sample_completions(model, tokenizer, prompts: list[str], *, n: int, temperature: float, seed: int,
                       max_tokens: int, stop: list[str], batch_size: int = 16) -> list[list[Completion]]:
    """n sampled completions of each prompt (plain sampling: no top-k, no top-p). Prompt p's samples (p:
    its position, the train problem's row) are drawn under the seed (seed, p): a rerun draws the same, and
    one problem's samples do not depend on the other problems' (batch_size, in the evaluation key, does
    change which samples come out)."""
    device = next(model.parameters()).device
    end_ids = {tokenizer.eos_token_id, tokenizer.pad_token_id} | set(
        np.atleast_1d(model.generation_config.eos_token_id or []).tolist())
    out = []
    for index, prompt in enumerate(prompts):
        ids = tokenizer(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"].to(device)
        generator_seed = int(np.random.SeedSequence([seed, index]).generate_state(1)[0])
        torch.manual_seed(generator_seed)
        samples = []
        for start in range(0, n, batch_size):
            rows = min(batch_size, n - start)
            generated = model.generate(
                input_ids=ids.expand(rows, -1), attention_mask=torch.ones_like(ids).expand(rows, -1),
                max_new_tokens=max_tokens, do_sample=True, temperature=float(temperature), top_k=0, top_p=1.0,
                stop_strings=stop or None, tokenizer=tokenizer if stop else None, pad_token_id=tokenizer.pad_token_id)
            samples += [finish_completion(tokenizer, row, end_ids, stop) for row in generated[:, ids.shape[1]:].tolist()]
        out.append(samples)
    return out
