"""The vLLM side of engine.speculation: population: a custom proposer class (vLLM's
speculative_config method "custom_class") that drafts from earlier members' answers
(randopt/engines/population_drafts.py).

vLLM builds it in every model runner and calls ``propose(sampled_token_ids, num_tokens_no_spec,
token_ids_cpu)`` after each step, with the tokens each running request accepted. It needs to know
which request each row is and where its prompt ends, which vLLM keeps in the runner's input batch:
the worker extension hands it the runner at setup (RandoptWorkerExtension.randopt_setup). A request
that has left the batch has finished: its answer joins the store, so the engines' members teach the
members after them, whatever their seeds (the store holds token ids only, never weights). Stats are
read (and reset) through the worker extension's randopt_draft_stats.

Imports no vLLM: the class is named in the engine's options, and this module is in the vLLM
engine's code key through that import.
"""
from __future__ import annotations

import time

from randopt.engines.population_drafts import PopulationDrafts


class PopulationProposer:
    def __init__(self, vllm_config):
        spec = vllm_config.speculative_config
        self.k = int(spec.num_speculative_tokens)
        self.max_model_len = int(vllm_config.model_config.max_model_len)
        self.drafts = PopulationDrafts(self.k)
        self.runner = None

    def attach(self, runner) -> None:
        """The model runner whose input batch names each row's request and prompt length."""
        self.runner = runner

    def load_model(self, *args, **kwargs) -> None:
        """No draft model: the drafts are earlier answers."""

    def propose(self, sampled_token_ids, num_tokens_no_spec, token_ids_cpu, slot_mappings=None) -> list[list[int]]:
        if self.runner is None:
            raise RuntimeError("PopulationProposer: no model runner attached; the randopt worker extension's "
                               "randopt_setup attaches it (engine.speculation: population needs the vLLM engine)")
        t0 = time.perf_counter()
        batch, drafts = self.runner.input_batch, self.drafts
        ids = list(batch.req_ids[:len(sampled_token_ids)])
        # Requests no longer in the batch have finished; their answers are stored first, so that a new
        # member's first step already drafts from the member just before it.
        for gone in drafts.active() - set(ids):
            drafts.finish(gone)
        out: list[list[int]] = []
        for row, (request_id, accepted) in enumerate(zip(ids, sampled_token_ids)):
            if not accepted:            # a prefill still in chunks: nothing to draft from yet
                out.append([])
                continue
            if not drafts.is_active(request_id):
                n_prompt = int(batch.num_prompt_tokens[row])
                drafts.start(request_id, tuple(token_ids_cpu[row, :n_prompt].tolist()))
            drafts.advance(request_id, list(accepted))
            if int(num_tokens_no_spec[row]) + self.k >= self.max_model_len:
                out.append([])          # no room for drafts before the context's end
                continue
            out.append(drafts.propose(request_id))
        # host time of drafting, the cost speculation adds to every step (bench/speculation/)
        drafts.stats["propose_us"] += int(1e6 * (time.perf_counter() - t0))
        drafts.stats["steps"] += 1
        return out

    def stats(self, reset: bool = True) -> dict:
        counts = dict(self.drafts.stats)
        if reset:
            self.drafts.stats.clear()
        return counts
