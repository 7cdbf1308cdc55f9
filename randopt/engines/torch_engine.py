"""The torch/transformers engine: the embedded default (CPU) and a plain CUDA path.

A resident base copy in the checkpoint dtype (2x weight memory) makes every seed an absolute rebuild
through randopt.engines.perturb, so the weights for a seed never depend on which seeds came before, and
restore is an exact copy. The model computes in `compute_dtype` (randopt/engines/compute_dtype.py):
the checkpoint dtype, or fp32 on a CPU without native bf16. In fp32 the seed's weights are still
built in the checkpoint dtype, rne(W0 + sigma*R), in a staging copy, then widened exactly into the
model's fp32 parameters, so a seed means the same weights whatever the engine computes in.
The option perturbation.switch: delta keeps no base copy (1x memory) and moves from seed to seed in
place, W += sigma_to*N_to - sigma_from*N_from; bf16/fp16 rounding then drifts, and drift() measures
how far against the checkpoint on disk (randopt/kernels/README.md has the drift table). The noise N is
Rademacher, or Gaussian with noise="gaussian" (perturbation.noise); every switch uses the one kind.
The option torch_decode (engine.torch_decode): eager decodes with a DynamicCache grown a step at a time, the
prompts' common prefix computed once; static decodes with a transformers StaticCache of fixed shape, for
which transformers compiles the decode step (torch.compile, CUDA graphs) on CUDA: one graph replay a
step instead of a Python loop over kernels. On a CPU static compiles nothing.
"""
from __future__ import annotations

from pathlib import Path

import inspect
import logging
import os

import numpy as np
import torch

from randopt.kernels.noise_kinds import RADEMACHER, check_kind, definition
from randopt.engines import perturb
from randopt.engines import compute_dtype as cdt
from randopt.model import shape
from randopt.engines.base import (Completion, TextLogprobs, chat_prompt, join_windows, scoring_windows,
                                  start_token_id)


SWITCHES = ("reconstruct", "delta")
DECODES = ("eager", "static")
# decode static: the StaticCache's length is the batch's prompt width + max_tokens rounded up to this many
# tokens, so batches of nearby widths share one cache shape (one compiled step, one CUDA graph) at the cost
# of at most this many masked slots read a step.
STATIC_CACHE_STEP = 128
# decode static on CUDA: torch.compile's recompile limit per code object, raised from its default (8) because
# each stacked model (one per member count) and each cache shape may add an entry; past the limit dynamo falls
# back to eager for that code without saying so in the results.
STATIC_RECOMPILE_LIMIT = 64


def _pick_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def finish_completion(tokenizer, ids: list[int], end_ids: set, stop: list[str]) -> Completion:
    """Generated ids -> a Completion: up to and including the first end id, decoded, cut before the first
    stop string (distillation's sampled control uses it too: randopt/distill/sample.py)."""
    n = next((i + 1 for i, t in enumerate(ids) if t in end_ids), None)
    ids = ids[:n] if n is not None else ids
    text = tokenizer.decode(ids, skip_special_tokens=True)
    cut = min((p for p in (text.find(s) for s in stop) if p >= 0), default=-1)
    if cut >= 0:
        text = text[:cut]
    return Completion(text=text, n_tokens=len(ids), finish="stop" if (n is not None or cut >= 0) else "length")


class TorchEngine:
    def __init__(self, model_dir: str, *, device: str = "auto", batch_size: int = 32,
                 threads: int | None = None, trust_remote_code: bool = False, max_context: int = 1024,
                 compute_dtype: str = "auto", switch: str = "reconstruct", noise: str = RADEMACHER,
                 torch_decode: str = "eager"):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model_path = Path(model_dir)
        if not (model_path / "config.json").is_file():
            raise FileNotFoundError(f"{model_dir}: no model here (config.json missing); run prepare_model "
                                    "or point model.path at a Hugging Face model directory")
        self.noise = check_kind(noise)  # before the model loads: a bad kind fails at once
        if torch_decode not in DECODES:
            raise ValueError(f"torch_decode must be one of {DECODES}, got {torch_decode!r} (engine.torch_decode)")
        self.decode = torch_decode
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
        if shape.read_marker(model_path):  # a shape model: no weight files, a seeded init (randopt/model/shape.py)
            model = shape.build_torch_model(model_path, trust_remote_code=trust_remote_code)
        else:
            model = AutoModelForCausalLM.from_pretrained(
                model_path, dtype="auto", local_files_only=True, trust_remote_code=trust_remote_code)
        self.model = model.to(self.device).eval()
        # named_parameters() lists a tied tensor once, under its checkpoint name (embed_tokens):
        # one logical tensor, one noise, shared storage for both uses.
        params = {name: p.data for name, p in self.model.named_parameters()}
        self.checkpoint_dtype = next(iter(params.values())).dtype
        name = str(self.checkpoint_dtype).removeprefix("torch.")
        dtype_name, why = cdt.resolve(compute_dtype, engine="torch", device=self.device.type, checkpoint_dtype=name)
        if compute_dtype != "auto":
            # The workflow passes the dtype it resolved at DAG build (it is in the keys); say what auto
            # makes of this host's CPU too, so a job on another kind of node shows a mismatch.
            auto_name, auto_why = cdt.resolve("auto", engine="torch", device=self.device.type, checkpoint_dtype=name)
            why = f"{why}; {auto_why}" + ("" if auto_name == dtype_name else f" (auto here would pick {auto_name})")
        self.compute_dtype, self.compute_dtype_reason = getattr(torch, dtype_name), why
        logging.getLogger("randopt").info("torch engine computes in %s (%s); noise: %s", dtype_name, why,
                                          definition(self.noise))
        if switch not in SWITCHES:
            raise ValueError(f"switch must be one of {SWITCHES}, got {switch!r}")
        self.switch = switch
        self.model_dir = model_path
        # delta: no base copy; the live weights' member (None: base) and the switches made so far.
        self._current: tuple[int, float] | None = None
        self._delta_switches = 0
        self._base = {n: t.detach().clone() for n, t in params.items()} if switch == "reconstruct" else None
        if self.compute_dtype == self.checkpoint_dtype:
            self._live, self._compute = params, None
        else:
            # The seed's weights in the checkpoint dtype (staging), widened into the fp32 model;
            # .to() keeps tied parameters tied.
            self._live = {n: t.detach().clone() for n, t in params.items()}
            self.model.to(self.compute_dtype)
            self._compute = {n: p.data for n, p in self.model.named_parameters()}
        # Built once: on CUDA it captures a whole switch as one graph replay (randopt/kernels/README.md).
        self._perturber = perturb.Perturber(self._live, self._base, noise=self.noise)
        # transformers renamed past_key_values to cache (5.x deprecates the old name); take what it has.
        self._cache_kwarg = "cache" if "cache" in inspect.signature(self.model.forward).parameters else "past_key_values"
        self._start_id = start_token_id(self.tokenizer, self.model.config.bos_token_id)
        # generate_members' last stack (members, model), kept for its next call with the same members (an
        # answer block each) until a switch: one model per member in memory while kept. Under decode static
        # a switch only forgets whose weights the stack holds (members None): the next group of as many
        # members is copied into the same tensors, which the compiled step and its CUDA graphs read in place.
        self._stacked: tuple[tuple | None, object] | None = None
        if torch_decode == "static" and self.device.type == "cuda":
            import torch._dynamo.config as dynamo_config
            name = "recompile_limit" if hasattr(dynamo_config, "recompile_limit") else "cache_size_limit"
            setattr(dynamo_config, name, max(getattr(dynamo_config, name), STATIC_RECOMPILE_LIMIT))

    # -- weights ---------------------------------------------------------------------------------
    def close(self) -> None:
        """Nothing to stop: the model lives in this process and goes with it."""

    def perturbable_names(self) -> list[str]:
        return list(self._live)

    def _forget_stack(self) -> None:
        """A switch: the stack no longer holds the members it was built for (eager: it goes; static: its
        tensors stay, to be refilled)."""
        keep = self.decode == "static" and self._stacked is not None
        self._stacked = (None, self._stacked[1]) if keep else None

    def set_weights(self, seed: int, sigma: float) -> None:
        self._forget_stack()
        if self.switch == "reconstruct":
            self._perturber.to_member_(seed, sigma)
        else:
            if sigma <= 0:
                raise ValueError(f"sigma must be > 0, got {sigma!r}")
            self._delta_to(seed, float(sigma))
        self._widen(self._live)

    def restore_base(self) -> None:
        self._forget_stack()
        if self.switch == "reconstruct":
            self._perturber.to_base_()
            self._widen(self._base)
        elif self._current is not None:
            self._delta_to(None, 0.0)
            self._widen(self._live)

    @torch.no_grad()
    def _widen(self, weights: dict[str, torch.Tensor]) -> None:
        """Copy checkpoint-dtype weights into the fp32 model: bf16/fp16 -> fp32 is exact."""
        if self._compute is not None:
            for name, target in self._compute.items():
                target.copy_(weights[name])

    def _delta_to(self, seed: int | None, sigma: float) -> None:
        """In place from the current member to (seed, sigma) (seed None: base), one fp32 add per element."""
        seed_from, sigma_from = self._current if self._current is not None else (None, 0.0)
        self._perturber.step_(seed_from, sigma_from, seed, sigma)
        self._current = None if seed is None else (seed, sigma)
        self._delta_switches += 1

    @torch.no_grad()
    def drift(self) -> dict | None:
        """Under the delta switch: go back to base in place and compare every live tensor with the
        checkpoint on disk (read one tensor at a time: memory stays 1x), so the record carries the
        drift this run's walk left. None under the default reconstruct switch (restore is exact)."""
        if self.switch == "reconstruct":
            return None
        from safetensors import safe_open

        self.restore_base()
        files = sorted(self.model_dir.glob("*.safetensors"))
        where = {}
        for path in files:
            with safe_open(path, framework="pt") as fh:
                where |= {key: path for key in fh.keys()}
        missing = sorted(set(self._live) - set(where))
        if missing:
            raise RuntimeError(f"{self.model_dir}: no checkpoint tensor for {missing[:3]} (of {len(missing)}): "
                               "the delta switch's drift is measured against *.safetensors in the model dir")
        n = changed = 0
        max_abs = sum_abs = 0.0
        for name, live in self._live.items():
            with safe_open(where[name], framework="pt") as fh:
                ref = fh.get_tensor(name).to(live.device)
            diff = (live.float() - ref.float()).abs()
            n += diff.numel()
            changed += int((live != ref).sum())
            max_abs = max(max_abs, float(diff.max()) if diff.numel() else 0.0)
            sum_abs += float(diff.double().sum())
        return {"switch": "delta", "switches": self._delta_switches, "elements": n,
                "elements_changed": changed, "fraction_changed": changed / n if n else 0.0,
                "max_abs": max_abs, "mean_abs": sum_abs / n if n else 0.0}

    def live_tensor(self, name: str) -> torch.Tensor:
        """The tensor the model computes with (fp32 when compute_dtype is wider than the checkpoint)."""
        return (self._compute or self._live)[name]

    def read_weights(self) -> dict[str, torch.Tensor]:
        """The weights the model computes with, in the checkpoint dtype. When it computes in a wider
        dtype, each value is first checked to be exactly a checkpoint-dtype value (the widening is
        exact), so what is returned is what ran."""
        out = {}
        for name, t in (self._compute or self._live).items():
            narrow = t.detach().to("cpu", self.checkpoint_dtype, copy=True)
            if t.dtype != self.checkpoint_dtype and not torch.equal(narrow.to(t.dtype), t.detach().cpu()):
                raise AssertionError(f"{name}: the {t.dtype} weights are not exact {self.checkpoint_dtype} values")
            out[name] = narrow
        return out

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

    @torch.inference_mode()
    def generate_members(self, members: list[tuple[int, float]], prompts: list[str], max_tokens: int,
                         stop: list[str]) -> list[list[Completion]]:
        """Greedy completions of every member in ``members`` ((seed, sigma); BASE for the base), decoded
        together: one forward pass a step over all members' rows (randopt/engines/member_batch.py).
        Returns one list of completions per member, in order; batch_size counts one member's rows. The
        live weights are left at the last member. The stack is kept for the next call with the same
        members until a switch (set_weights, restore_base), so answer blocks of one group stack once;
        empty prompts only stack."""
        from randopt.engines.member_batch import fill_members, member_count, stack_members
        key = tuple((int(seed), float(sigma)) for seed, sigma in members)
        if self._stacked is None or self._stacked[0] != key:
            shell = self._stacked[1] if self._stacked is not None else None
            if self.decode == "static" and shell is not None and member_count(shell) == len(members):
                fill_members(self, shell, members)   # the same tensors: no new compile, no new graph
                model = shell
            else:
                self._stacked = shell = None  # the old stack goes before the new one is built
                model = stack_members(self, members)   # switches, which forgets _stacked
            self._stacked = (key, model)
        model = self._stacked[1]
        out: list[list[Completion]] = [[] for _ in members]
        for start in range(0, len(prompts), self.batch_size):
            chunk = prompts[start:start + self.batch_size]
            flat = self._generate_batch(chunk, max_tokens, list(stop), model=model, members=len(members))
            for m in range(len(members)):
                out[m] += flat[m * len(chunk):(m + 1) * len(chunk)]
        return out

    def _generate_batch(self, prompts: list[str], max_tokens: int, stop: list[str], model=None,
                        members: int = 1) -> list[Completion]:
        """One generate call; with a member-batched model, its ``members`` members' completions one after
        another (member-major, as its rows)."""
        tok, model = self.tokenizer, model if model is not None else self.model
        ids = [tok(p, add_special_tokens=False)["input_ids"] for p in prompts]
        if self.decode == "static":
            inputs = self._static_inputs(ids, model, members, max_tokens)
        else:
            inputs = self._shared_prefix_inputs(ids, model, members)
        generated = model.generate(
            **inputs, max_new_tokens=max_tokens, do_sample=False, temperature=None, top_p=None, top_k=None,
            stop_strings=stop or None, tokenizer=tok if stop else None, pad_token_id=tok.pad_token_id,
        )
        end_ids = self.end_ids()
        return [finish_completion(tok, ids, end_ids, stop) for ids in generated[:, inputs["input_ids"].shape[1]:].tolist()]

    def end_ids(self) -> set:
        """The token ids that end an answer: EOS, pad and the model's own end-of-turn ids."""
        tok = self.tokenizer
        return {tok.eos_token_id, tok.pad_token_id} | set(
            np.atleast_1d(self.model.generation_config.eos_token_id or []).tolist())

    def _shared_prefix_inputs(self, ids: list[list[int]], model=None, members: int = 1) -> dict:
        """generate() inputs that compute the prompts' common token prefix once, not once per row.

        Every prompt of a run starts with the same system line and worked examples (~70 % of its
        tokens in the default), and on a CPU the prefill of those tokens was over half of a seed's
        time. The prefix goes through the model once at batch 1; its KV cache is repeated over the
        batch; each row's own suffix follows, left-padded *between* prefix and suffix. The attention
        mask has a hole there, and generate() numbers positions by the mask's cumsum, so each row
        sees exactly its unpadded prompt at its unpadded positions. With a member-batched model the rows
        are the prompts once per member (member-major), and the prefix goes through at batch ``members``.
        """
        from transformers import DynamicCache
        prefix = min(len(os.path.commonprefix(ids)), min(map(len, ids)) - 1)  # each row feeds >= 1 token
        inputs = self._padded_inputs(ids, prefix, members)
        model = model if model is not None else self.model
        if prefix > 0:
            cache = DynamicCache(config=model.config)
            model(input_ids=inputs["input_ids"][::len(ids), :prefix], **{self._cache_kwarg: cache}, use_cache=True)
            cache.batch_repeat_interleave(len(ids))
            inputs[self._cache_kwarg] = cache
        return inputs

    def _static_inputs(self, ids: list[list[int]], model, members: int, max_tokens: int) -> dict:
        """generate() inputs for decode static: the prompts left-padded (each row's whole prompt goes through
        the prefill: the shared prefix's DynamicCache cannot seed a StaticCache), and a StaticCache of
        rows x (width + max_tokens, rounded up to STATIC_CACHE_STEP), whose fixed shape lets transformers
        compile the decode step on CUDA."""
        from transformers import StaticCache
        inputs = self._padded_inputs(ids, 0, members)
        width = inputs["input_ids"].shape[1]
        length = -(-(width + max_tokens) // STATIC_CACHE_STEP) * STATIC_CACHE_STEP
        inputs[self._cache_kwarg] = StaticCache(config=model.config, max_cache_len=length)
        return inputs

    def _padded_inputs(self, ids: list[list[int]], prefix: int, members: int) -> dict:
        """input_ids and attention_mask, once per member (member-major): the first ``prefix`` tokens common to
        all rows, then each row's own suffix left-padded (prefix 0: plain left padding)."""
        pad = self.tokenizer.pad_token_id
        width = max(map(len, ids)) - prefix
        input_ids = torch.full((len(ids), prefix + width), pad, dtype=torch.long)
        mask = torch.zeros_like(input_ids)
        for r, row in enumerate(ids):
            input_ids[r, :prefix] = torch.tensor(row[:prefix], dtype=torch.long)
            input_ids[r, prefix + width - (len(row) - prefix):] = torch.tensor(row[prefix:], dtype=torch.long)
            mask[r, :prefix] = 1
            mask[r, prefix + width - (len(row) - prefix):] = 1
        return {"input_ids": input_ids.repeat(members, 1).to(self.device), "attention_mask": mask.repeat(members, 1).to(self.device)}

    # -- teacher forcing -------------------------------------------------------------------------
    # A batch's logits are rows x width x vocab floats (SmolLM2: 0.2 MB a token in fp32), so a batch is
    # capped by tokens as well as by batch_size: 8192 tokens is ~1.6 GB for a 49k vocabulary.
    MAX_LOGIT_TOKENS = 8192

    def _logit_batches(self, widths_longest_first: list[int]) -> list[range]:
        """Consecutive row ranges of at most batch_size rows and MAX_LOGIT_TOKENS padded tokens
        (one row always fits, however long)."""
        batches, start = [], 0
        while start < len(widths_longest_first):
            width, stop = widths_longest_first[start], start + 1
            while stop < len(widths_longest_first) and stop - start < self.batch_size \
                    and (stop + 1 - start) * width <= self.MAX_LOGIT_TOKENS:
                stop += 1
            batches.append(range(start, stop))
            start = stop
        return batches

    @torch.inference_mode()
    def token_logprobs(self, texts: list[str], max_context: int | None = None) -> list[TextLogprobs]:
        token_ids = [self.tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
        windows, owners = scoring_windows(token_ids, self._start_id, max_context or self.max_context)
        scored: list[np.ndarray | None] = [None] * len(windows)
        order = sorted(range(len(windows)), key=lambda i: -len(windows[i]))  # less padding per batch
        for rows in self._logit_batches([len(windows[i]) for i in order]):
            members = order[rows.start:rows.stop]
            batch = [windows[i] for i in members]
            width = max(map(len, batch))
            ids = torch.full((len(batch), width), self.tokenizer.pad_token_id, dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for r, w in enumerate(batch):  # right padding: positions stay 0..len-1
                ids[r, :len(w)] = torch.tensor(w)
                mask[r, :len(w)] = 1
            logits = self.model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device)).logits[:, :-1]
            # log p(realized) = logit(realized) - logsumexp(logits): one read of the [B, T, vocab] logits,
            # where log_softmax wrote a second tensor that size (0.8 GB a batch for SmolLM2's vocab).
            realized = (logits.gather(-1, ids[:, 1:].to(self.device).unsqueeze(-1)).squeeze(-1).float()
                        - torch.logsumexp(logits.float(), dim=-1)).cpu()
            for r, i in enumerate(members):
                scored[i] = realized[r, :len(batch[r]) - 1].numpy()
        return join_windows(texts, owners, scored)
