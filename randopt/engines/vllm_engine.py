"""The vLLM engine (GPU): the engine of the standard.

A worker extension (vllm_worker.py) rebuilds weights in place on every tensor-parallel rank, so
CUDA graphs stay on. Prefix caching is off: the weights change under the same prompts, and a cached
prefix computed under another seed's weights would be silently wrong.

Memory: vLLM gives the KV cache ``gpu_memory_utilization`` of the card after loading the weights;
the base copy (one more copy of this rank's weights) is allocated afterwards, outside that budget.
``gpu_memory_utilization: auto`` therefore takes  0.90 - weight bytes per GPU / card bytes  (with
0.90 leaving room for CUDA graphs and the allocator), e.g. Qwen2.5-72B bf16 at TP=8 on 80 GB:
0.90 - 18.2/80 = 0.67; SmolLM2-135M on an H200: 0.90.

``kv_cache_memory_bytes`` (vLLM's own option) fixes the KV cache instead, and vLLM then skips its memory
profiling, the one step of a start that must not see another engine start on the same GPU (the start lock,
randopt/runtime/resident/start_lock.py). Engines side by side on one GPU (engine.engines_per_gpu > 1, one GPU an
engine) get a fixed KV cache of their share (``start_alongside``), so they build at once: on an H100 the real
1.5B's three were all up in 34.4 s with a warm compile cache, against 43, 58 and 73 s in turn
(bench/engines_per_gpu/README.md). Which engines share the card never changes an answer.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from randopt.kernels.noise_kinds import check_kind
from randopt.engines.base import (DEFAULT_MAX_MODEL_LEN, Completion, TextLogprobs, chat_prompt, join_windows, scoring_windows,
                                  start_token_id)
from randopt.engines.switch import generate_each
from randopt.checkout import REPO
from randopt.engines.vllm_speculation import speculative_config, unsupported_reason
from randopt.engines.vllm_worker import RandoptWorkerExtension
from randopt.engines import memory
from randopt.model import shape

# vLLM loads the worker extension by name; importing the class (it imports no vllm) keeps the name
# right and puts its module in this engine's code key (randopt/code_keys.py follows imports).
EXTENSION = f"{RandoptWorkerExtension.__module__}.{RandoptWorkerExtension.__qualname__}"
# NVLink multicast (NVLS) stays off in NCCL, torch symmetric memory and NVSHMEM: on a host whose GPUs
# others share, a program using it can put the host's GPUs out of service (for a day or more on the
# machines this project runs on). Set with setdefault before starting vLLM, so the spawned engine core
# and workers inherit them; bench/vllm/h200_session.sh exports the same.
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def auto_memory_utilization(model_dir: str, tp: int, card_bytes: int | None = None, engines: int = 1) -> float:
    """memory.HEADROOM - weight bytes per GPU / card bytes; card_bytes defaults to GPU 0's memory (given in
    tests, which have no GPU). With engines > 1 side by side on each GPU (engine.engines_per_gpu), the
    card is split between them, each keeping its base copy (randopt/engines/memory.py)."""
    weight_bytes = memory.weight_bytes(model_dir) or 0
    card = card_bytes
    if card is None:
        import torch
        card = torch.cuda.get_device_properties(0).total_memory
    if engines > 1:
        return memory.memory_utilization(engines, weight_bytes / tp, card)
    value = memory.HEADROOM - weight_bytes / tp / card
    if value < 0.2:
        raise ValueError(f"{model_dir}: weights of {weight_bytes / 2**30:.1f} GiB over tp={tp} leave too little of "
                         f"a {card / 2**30:.0f} GiB card for a base copy and a KV cache; raise tensor_parallel_size")
    return round(value, 3)


def set_vllm_environment(tensor_parallel_size: int, env=None, batch_invariant: bool = False) -> None:
    """The environment vLLM and its processes start with (os.environ by default); values already set
    win (setdefault), so an exported value is kept, except VLLM_BATCH_INVARIANT, which engine.batch_invariant sets."""
    env = os.environ if env is None else env
    # engine.batch_invariant is in the answers' keys: an exported VLLM_BATCH_INVARIANT must not make the answers
    # other than the keys say, so the knob overrides it either way. vLLM reads it when its engine is built.
    env["VLLM_BATCH_INVARIANT"] = "1" if batch_invariant else "0"
    # vLLM's own processes (the TP workers; the engine core when it is separate), forked after CUDA
    # is initialized here (a test, or auto_memory_utilization's query of the card), fail: spawn them.
    env.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    if tensor_parallel_size == 1:
        # On one GPU the engine core runs in this process: a spawned core imports vLLM again, and
        # on the H200 that was 19-22 s of every stage's ~65 s start. With several GPUs the core
        # stays a process of its own (vLLM's default, the only mode run with TP > 1 so far).
        # vLLM caches its environment once an engine is built, so the first engine of a process
        # decides for any later one (a stage builds one).
        env.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    # NVLink multicast stays off (MULTICAST_OFF says why), here and in vLLM's processes.
    for name, value in MULTICAST_OFF.items():
        env.setdefault(name, value)
    # Workers are separate processes: they import the extension from this checkout.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))


def llm_options(model_dir: str, *, tensor_parallel_size: int, gpu_memory_utilization: float, enforce_eager: bool,
                trust_remote_code: bool, max_model_len: int, batch_size: int, speculation: str = "none",
                draft_tokens: int = 8, worker_process: bool = False, kv_cache_memory_bytes: int | None = None) -> dict:
    """The arguments of vllm.LLM. Prefix caching is off: the weights change under the same prompts. A shape
    model (randopt/model/shape.py) has no weight files: vLLM's dummy load format makes them (docs/gpu.md)."""
    dummy = {"load_format": "dummy"} if shape.read_marker(model_dir) else {}
    options = dummy | dict(model=model_dir, tokenizer=model_dir, dtype="auto", seed=0,
                   tensor_parallel_size=tensor_parallel_size, gpu_memory_utilization=gpu_memory_utilization,
                   enforce_eager=enforce_eager, enable_prefix_caching=False,
                   trust_remote_code=trust_remote_code, worker_extension_cls=EXTENSION,
                   max_model_len=max_model_len, max_num_seqs=batch_size)
    # engine.worker_process: on one GPU vLLM runs its worker in the core's process unless told "mp"; with more
    # GPUs it is mp already. A worker process of its own overlaps its GPU work with the core's host work.
    if worker_process and tensor_parallel_size == 1:
        options["distributed_executor_backend"] = "mp"
    if kv_cache_memory_bytes:
        # one of the factors of vLLM 0.25's compile-cache key (gpu_memory_utilization is not): the first start with
        # a given size compiles the graphs anew (bench/engines_per_gpu/README.md)
        options["kv_cache_memory_bytes"] = int(kv_cache_memory_bytes)
    spec = speculative_config(speculation, draft_tokens)
    return options | ({"speculative_config": spec} if spec else {})


class VllmEngine:
    @staticmethod
    def preload(tensor_parallel_size: int = 1, batch_invariant: bool = False, **_options) -> None:
        """Import vLLM, its environment set first (as __init__ sets it), without touching the GPU: a
        resident server does this before it waits its turn to build (randopt/runtime/resident/start_lock.py)."""
        set_vllm_environment(tensor_parallel_size, batch_invariant=batch_invariant)
        try:
            from vllm import LLM  # noqa: F401
        except ImportError as err:
            raise RuntimeError(f"engine 'vllm' needs vllm installed on a CUDA machine ({err}); "
                               "use engine: torch on a CPU") from err

    @staticmethod
    def start_alongside(model_dir: str, options: dict, card_bytes: int | None = None) -> tuple[dict, str | None]:
        """The options to build with, and why this engine may build while others build on its GPU (None: it
        takes its turn under the start lock). Engines side by side on one GPU each get a fixed KV cache of their
        share, which spares vLLM's memory profiling; a tensor-parallel engine, or one whose share leaves too
        little KV cache for a fixed one, takes its turn. card_bytes: GPU 0's memory by default (given in tests)."""
        tp, n = int(options.get("tensor_parallel_size", 1)), int(options.get("engines_per_gpu", 1))
        if tp != 1 or n < 2 or options.get("kv_cache_memory_bytes"):
            return options, None
        if card_bytes is None:
            import torch
            card_bytes = torch.cuda.get_device_properties(0).total_memory
        weights = memory.weight_bytes(model_dir) or 0
        util, kv = memory.alongside_kv_cache(options.get("gpu_memory_utilization", "auto"), n, weights, card_bytes)
        if kv is None:
            return options, None
        why = (f"{n} engines share the GPU, each with a fixed {kv / 2**30:.2f} GiB KV cache ({util} of the "
               f"{card_bytes / 2**30:.1f} GiB card less {weights / 2**30:.2f} GiB of weights and a "
               f"{memory.KV_RESERVE_BYTES / 2**30:.0f} GiB reserve), so vLLM skips the memory profiling the start "
               f"lock keeps apart")
        return options | {"gpu_memory_utilization": util, "kv_cache_memory_bytes": kv}, why

    def __init__(self, model_dir: str, *, device: str = "auto", batch_size: int = 256,
                 tensor_parallel_size: int = 1, gpu_memory_utilization: float | str = "auto",
                 trust_remote_code: bool = False, max_context: int = 1024, max_model_len: int | None = None,
                 enforce_eager: bool = False, threads: int | None = None, engines_per_gpu: int = 1,
                 noise: str = "rademacher", speculation: str = "none", draft_tokens: int = 8,
                 worker_process: bool = False, kv_cache_memory_bytes: int | None = None, batch_invariant: bool = False):
        check_kind(noise)  # before vLLM starts: an unknown kind fails in seconds, not after the load
        # before vLLM starts: a bad speculation setting, or a vLLM without the custom proposer, fails in seconds
        if speculative_config(speculation, draft_tokens) and (why := unsupported_reason()):
            raise RuntimeError(f"engine.speculation: {why}")
        set_vllm_environment(tensor_parallel_size, batch_invariant=batch_invariant)
        if gpu_memory_utilization == "auto":
            gpu_memory_utilization = auto_memory_utilization(model_dir, tensor_parallel_size, engines=engines_per_gpu)
        self.model_dir = str(model_dir)
        self.max_context = int(max_context)
        positions = json.loads((Path(model_dir) / "config.json").read_text()).get("max_position_embeddings", 2048)
        max_model_len = max_model_len or min(positions, max(self.max_context, DEFAULT_MAX_MODEL_LEN))
        self.max_model_len = max_model_len
        # a scoring window is a prompt that generates one token: window + 1 must fit max_model_len
        self.max_context = min(self.max_context, max_model_len - 1)
        from vllm import LLM  # after the environment above: vLLM reads it when the engine is built

        self.llm = LLM(**llm_options(self.model_dir, tensor_parallel_size=tensor_parallel_size,
                                     gpu_memory_utilization=gpu_memory_utilization, enforce_eager=enforce_eager,
                                     trust_remote_code=trust_remote_code, max_model_len=max_model_len,
                                     batch_size=batch_size, speculation=speculation, draft_tokens=draft_tokens,
                                     worker_process=worker_process, kv_cache_memory_bytes=kv_cache_memory_bytes))
        self.speculation = speculation
        # Every rank perturbs with the same noise kind (the worker extension builds its Perturber with it).
        self.setup = self.llm.collective_rpc("randopt_setup", args=(self.model_dir, noise))
        self.noise = noise
        self.tokenizer = self.llm.get_tokenizer()
        self._start_id = start_token_id(self.tokenizer)

    def close(self) -> None:
        """Stop the engine core and its workers now, while the interpreter is whole: left to exit-time
        finalizers, a finished stage was seen to abort (SIGABRT, exit 134) after writing its output."""
        llm, self.llm = getattr(self, "llm", None), None
        if llm is not None:
            llm.llm_engine.engine_core.shutdown()

    # -- weights ---------------------------------------------------------------------------------
    def set_weights(self, seed: int, sigma: float) -> None:
        self.llm.collective_rpc("randopt_set", args=(int(seed), float(sigma)))

    def restore_base(self) -> None:
        self.llm.collective_rpc("randopt_restore")

    def perturbable_names(self) -> list[str]:
        from randopt.engines.vllm_layouts import checkpoint_shapes
        return list(checkpoint_shapes(self.model_dir))

    def read_weights(self) -> dict[str, "torch.Tensor"]:
        """The live weights under the checkpoint's names and shapes, gathered from every rank."""
        import torch
        from randopt.kernels.layout import as_2d

        out: dict[str, torch.Tensor] = {}
        for rank_pieces in self.llm.collective_rpc("randopt_read_logical"):
            for name, shape, row, nrows, col, ncols, dtype, raw in rank_pieces:
                dtype = getattr(torch, dtype)
                values = torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype).view(nrows, ncols)
                if name not in out:
                    out[name] = torch.zeros(shape, dtype=dtype)
                out[name].view(*as_2d(shape))[row:row + nrows, col:col + ncols] = values
        return out

    # -- prompts and generation ----------------------------------------------------------------
    def chat_prompt(self, user_message: str, system: str | None = None,
                    examples: list[tuple[str, str]] = ()) -> str:
        return chat_prompt(self.tokenizer, user_message, system, examples)

    def _tokens(self, texts: list[str]) -> list[list[int]]:
        return [self.tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]

    def generate(self, prompts: list[str], max_tokens: int, stop: list[str]) -> list[Completion]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        params = SamplingParams(temperature=0.0, max_tokens=max_tokens, stop=list(stop) or None,
                                skip_special_tokens=True)
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=ids) for ids in self._tokens(prompts)],
                                    params, use_tqdm=False)
        return [Completion(text=o.outputs[0].text, n_tokens=len(o.outputs[0].token_ids),
                           finish="length" if o.outputs[0].finish_reason == "length" else "stop") for o in outputs]

    def generate_members(self, members: list[tuple[int, float]], prompts: list[str], max_tokens: int,
                         stop: list[str]) -> list[list[Completion]]:
        """Member by member (switch, then generate): vLLM has no member-batched form; validation refuses
        engine.member_batch above 1 with it, and the protocol holds all the same."""
        return generate_each(self, members, prompts, max_tokens, stop)

    # -- teacher forcing -------------------------------------------------------------------------
    def score_token_ids(self, windows: list[list[int]]) -> list[tuple[np.ndarray, np.ndarray]]:
        """For each token sequence: log-prob and rank (1 = argmax) of every token after the first,
        through prompt_logprobs."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        params = SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=1)
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=w) for w in windows], params, use_tqdm=False)
        result = []
        for window, out in zip(windows, outputs):
            entries = [out.prompt_logprobs[i][tok] for i, tok in enumerate(window) if i > 0]
            result.append((np.array([e.logprob for e in entries], np.float32),
                           np.array([e.rank for e in entries], np.int64)))
        return result

    def token_logprobs(self, texts: list[str], max_context: int | None = None) -> list[TextLogprobs]:
        if max_context is not None and max_context > self.max_model_len - 1:
            raise ValueError(f"a scoring window of {max_context} tokens does not fit this engine's context of "
                             f"{self.max_model_len} (a window is a prompt that generates one token); start the "
                             f"engine with max_context {max_context} or max_model_len {max_context + 1}")
        windows, owners = scoring_windows(self._tokens(texts), self._start_id, max_context or self.max_context)
        return join_windows(texts, owners, [lp for lp, _ in self.score_token_ids(windows)])
