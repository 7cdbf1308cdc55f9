"""The "randopt" model of lm-evaluation-harness: a run's base model, one member or a top-k ensemble, on
one loaded engine whose weights are switched in place (randopt/engines/switch.py), never copied.

Requests are served member by member: each member is switched to once per call lm-eval makes (one
call per request kind, holding every task's requests of that kind) and answers all of them, so an
ensemble of k members costs k switches a call, whatever the number of requests.

- generate_until: every member decodes greedily with the engine's generate (lm-eval's `until` strings
  are its stop strings, `max_gen_toks` its max_tokens). An ensemble returns one member's own
  completion: that of the best-ranked member whose answer (randopt/harness/extract.py) is the majority
  answer (randopt/ensemble/majority_vote.py majority_index, ties to the best-ranked); when no member gives an
  answer, the best-ranked member's.
- loglikelihood: log p(continuation | context) from the engine's teacher-forced log-probs of
  context + continuation, split as lm-eval splits a pair (trailing spaces of the context move to the
  continuation; the continuation is the tokens of the whole beyond the context's own). An ensemble's
  is the log of the mean of its members' probabilities of the continuation, the exact mixture of
  randopt/ensemble/bpb.py (ensemble_logprobs, accumulated in float64 over fp32 member log-probs).
  is_greedy: the model's greedy completion of the context, as long as the continuation in tokens,
  begins with the continuation; an ensemble's greedy completion is the one its vote picks among the
  members' (compared as text, ties to the best-ranked), so generate_until and is_greedy agree.
- loglikelihood_rolling: the same mixture of each member's log-probability of the whole text.
"""
from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Sequence

import numpy as np
from lm_eval.api.model import LM
from lm_eval.api.registry import register_model

from randopt.engines.base import Engine
from randopt.engines.switch import switch_weights
from randopt.ensemble.bpb import ensemble_logprobs
from randopt.ensemble.majority_vote import majority_index
from randopt.harness.extract import extractor_for
from randopt.harness.run import Choice, Run, member_key, parse_choice

log = logging.getLogger("randopt")

# lm-eval's own default for a generate_until request that names no max_gen_toks (its HFLM's)
DEFAULT_MAX_GEN_TOKS = 256
# Tokens one scored text may have before the engine scores it in windows (each restarted at the start
# token): lm-eval's HFLM default max_length, and within SmolLM2's 8192 positions.
MAX_CONTEXT = 2048


def split_pair(context: str, continuation: str) -> tuple[str, str]:
    """lm-eval's split of a loglikelihood pair (TemplateLM._encode_pair): the context's trailing spaces
    belong to the continuation, so that " 5" is scored as the token a word boundary makes."""
    spaces = len(context) - len(context.rstrip())
    return (context[:-spaces], context[-spaces:] + continuation) if spaces else (context, continuation)


@register_model("randopt")
class RandoptLM(LM):
    """lm-eval's --model randopt --model_args run_dir=DIR,choice=ensemble:0.1 (randopt/harness/run.py
    CHOICE_HELP); randopt/stages/lm_eval.py builds it on an engine it shares between several choices."""

    def __init__(self, run_dir: str = ".", choice: str = "base", record: str | None = None,
                 ranking: str | None = None, model_dir: str | None = None, threads: int | None = None,
                 **lm_eval_options):
        super().__init__()
        # lm-eval passes its batch_size, max_batch_size and device: the run's engine options decide those
        run = Run.open(run_dir, record=record, ranking=ranking, model_dir=model_dir)
        chosen = parse_choice(choice)
        members = run.members(chosen)
        self._setup(run, chosen, members, load_engine(run, threads))

    @classmethod
    def on_engine(cls, run: Run, choice: Choice, members: list[dict], engine: Engine) -> "RandoptLM":
        """The model of one choice on an engine already loaded (several choices share one)."""
        lm = cls.__new__(cls)
        LM.__init__(lm)
        lm._setup(run, choice, members, engine)
        return lm

    def _setup(self, run: Run, choice: Choice, members: list[dict], engine: Engine) -> None:
        self.run, self.choice, self.members, self.engine = run, choice, members, engine
        self.run_task = run.task()
        self._warned_sampling = False

    # -- lm-eval's chat-template hooks (--apply_chat_template) -----------------------------------------
    @property
    def tokenizer_name(self) -> str:
        return str(self.run.model_dir).replace("/", "__")

    def chat_template(self, chat_template: bool | str = False) -> str | None:
        return getattr(self.engine.tokenizer, "chat_template", None) or ""

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        return self.engine.tokenizer.apply_chat_template(chat_history, tokenize=False,
                                                         add_generation_prompt=add_generation_prompt)

    # -- serving members -----------------------------------------------------------------------------
    def _each_member(self, answer: Callable[[], list]) -> list[list]:
        """answer() under each member's weights, best-ranked first: one switch per member."""
        out = []
        for member in self.members:
            switch_weights(self.engine, *member_key(member))
            out.append(answer())
        return out

    def _generate(self, prompts: Sequence[str], settings: Sequence[tuple[int, tuple[str, ...]]]) -> list[list[str]]:
        """Each member's greedy completion of every prompt: [member][prompt]. Prompts are batched per
        (max_tokens, stop strings), the engine's unit of a call."""
        groups: dict[tuple, list[int]] = defaultdict(list)
        for i, setting in enumerate(settings):
            groups[setting].append(i)

        def answer() -> list[str]:
            texts = [""] * len(prompts)
            for (max_tokens, stop), rows in groups.items():
                for i, completion in zip(rows, self.engine.generate([prompts[i] for i in rows], max_tokens, list(stop))):
                    texts[i] = completion.text
            return texts
        return self._each_member(answer)

    def _voted(self, completions: list[str], key: Callable[[str], object]) -> int:
        """The member whose completion the ensemble returns (its index in rank order)."""
        winner = majority_index([key(c) for c in completions])
        return 0 if winner is None else winner

    def _decode_settings(self, gen_kwargs: dict) -> tuple[int, tuple[str, ...]]:
        kwargs = dict(gen_kwargs or {})
        if kwargs.get("do_sample") and not self._warned_sampling:
            log.warning("randopt: lm-eval asked to sample (do_sample); members always decode greedily")
            self._warned_sampling = True
        until = kwargs.get("until") or []
        until = [until] if isinstance(until, str) else list(until)
        return int(kwargs.get("max_gen_toks", DEFAULT_MAX_GEN_TOKS)), tuple(until)

    # -- lm-eval's three request kinds ---------------------------------------------------------------
    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        prompts = [r.args[0] for r in requests]
        settings = [self._decode_settings(r.args[1]) for r in requests]
        by_member = self._generate(prompts, settings)
        out = []
        for i, request in enumerate(requests):
            completions = [texts[i] for texts in by_member]
            key = extractor_for(request.task_name or "", self.run_task)
            out.append(completions[self._voted(completions, key)])
            self.cache_hook.add_partial("generate_until", request.args, out[-1])
        return out

    def loglikelihood(self, requests, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        pairs = [split_pair(*r.args) for r in requests]
        tokenize = self._token_count
        n_continuation = [tokenize(c + x) - tokenize(c) for c, x in pairs]
        texts = [c + x for c, x in pairs]
        lls = self._mixture(self._each_member(lambda: [
            float(np.sum(s.logprobs[len(s.logprobs) - n:], dtype=np.float64))
            for s, n in zip(self.engine.token_logprobs(texts), n_continuation)]))
        greedy = self._is_greedy(pairs, n_continuation)
        out = []
        for request, ll, g in zip(requests, lls, greedy):
            out.append((ll, g))
            self.cache_hook.add_partial("loglikelihood", request.args, out[-1])
        return out

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        texts = [r.args[0] for r in requests]
        lls = self._mixture(self._each_member(lambda: [
            float(np.sum(s.logprobs, dtype=np.float64)) for s in self.engine.token_logprobs(texts)]))
        for request, ll in zip(requests, lls):
            self.cache_hook.add_partial("loglikelihood_rolling", request.args, ll)
        return lls

    # -- helpers -------------------------------------------------------------------------------------
    def _token_count(self, text: str) -> int:
        """Tokens of a text as the engine scores it (its own tokenizer, no special tokens added)."""
        return len(self.engine.tokenizer(text, add_special_tokens=False)["input_ids"]) if text else 0

    @staticmethod
    def _mixture(by_member: list[list[float]]) -> list[float]:
        """Per request, log of the mean of the members' probabilities (one member: its own value)."""
        if len(by_member) == 1:
            return list(by_member[0])
        return [float(x) for x in ensemble_logprobs(np.asarray(m, dtype=np.float64) for m in by_member)]

    def _is_greedy(self, pairs: list[tuple[str, str]], n_continuation: list[int]) -> list[bool]:
        """Whether each continuation is the model's greedy completion of its context (module docstring).
        Contexts shared by several continuations (a multiple-choice question) are decoded once."""
        longest: dict[str, int] = {}
        for (context, _), n in zip(pairs, n_continuation):
            longest[context] = max(longest.get(context, 0), n)
        # an empty context has no prompt to decode from (the engine generates after a prompt): never greedy
        contexts = [c for c in longest if c and longest[c] > 0]
        by_member = self._generate(contexts, [(longest[c], ()) for c in contexts]) if contexts else []
        chosen = {}
        for i, context in enumerate(contexts):
            completions = [texts[i] for texts in by_member]
            chosen[context] = completions[self._voted(completions, lambda text: text)]
        return [n == 0 or (context in chosen and chosen[context].startswith(continuation))
                for (context, continuation), n in zip(pairs, n_continuation)]


def load_engine(run: Run, threads: int | None = None) -> Engine:
    """The run's engine (kind, device, compute dtype, noise) on its prepared model, loaded once."""
    from randopt.engines.factory import make_engine
    options = run.engine_options() | {"max_context": MAX_CONTEXT} | ({"threads": threads} if threads else {})
    return make_engine(run.record["engine"]["kind"], str(run.model_dir), **options)
