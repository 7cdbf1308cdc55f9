"""What the vLLM engine sets up before vLLM starts, tested without vLLM or a GPU: the memory share
(`gpu_memory_utilization: auto`), the environment its processes inherit (NVLink multicast off) and
the LLM arguments (prefix caching off), as README "On a GPU with vLLM" documents them."""
from __future__ import annotations

import os

import pytest

from randopt.engines.vllm_engine import EXTENSION, auto_memory_utilization, llm_options, set_vllm_environment
from randopt.engines.vllm_engine import MULTICAST_OFF
from tests.conftest import REPO

GB = 10**9


def weights(tmp_path, *sizes: int):
    """A model dir whose *.safetensors files have these sizes (sparse files: nothing is written)."""
    for i, size in enumerate(sizes):
        with open(tmp_path / f"model-{i:05d}.safetensors", "wb") as fh:
            fh.truncate(size)
    (tmp_path / "config.json").write_text("{}")  # not a weight file: not counted
    return str(tmp_path)


def test_auto_memory_utilization_is_headroom_minus_weights_per_gpu(tmp_path):
    # README: Qwen2.5-72B bf16 (145.6 GB) at TP 8 on 80 GB cards: 0.90 - 18.2/80 = 0.67.
    model = weights(tmp_path, 72_800_000_000, 72_800_000_000)
    assert auto_memory_utilization(model, 8, card_bytes=80 * GB) == 0.672
    assert auto_memory_utilization(model, 4, card_bytes=141 * GB) == round(0.90 - 36.4 / 141, 3)


def test_auto_memory_utilization_refuses_too_little_room(tmp_path):
    model = weights(tmp_path, 60 * GB)
    with pytest.raises(ValueError, match="raise tensor_parallel_size"):
        auto_memory_utilization(model, 1, card_bytes=80 * GB)  # 0.90 - 0.75 < 0.2


@pytest.mark.parametrize("tp", [1, 2, 8])
def test_the_environment_keeps_multicast_off_and_keeps_exported_values(tp):
    env = {"NCCL_NVLS_ENABLE": "1", "PYTHONPATH": "/elsewhere"}  # one exported by the user: it wins
    set_vllm_environment(tp, env)
    assert MULTICAST_OFF == {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                             "NVSHMEM_DISABLE_NVLS": "1"}  # the three README names
    assert env["NCCL_NVLS_ENABLE"] == "1"
    assert env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1" and env["NVSHMEM_DISABLE_NVLS"] == "1"
    fresh: dict = {}
    set_vllm_environment(tp, fresh)
    assert {k: fresh[k] for k in MULTICAST_OFF} == MULTICAST_OFF
    assert fresh["VLLM_WORKER_MULTIPROC_METHOD"] == "spawn"
    # On one GPU the engine core runs in this process; with several it is vLLM's own process.
    assert fresh.get("VLLM_ENABLE_V1_MULTIPROCESSING") == ("0" if tp == 1 else None)
    assert env["PYTHONPATH"].split(os.pathsep) == [str(REPO), "/elsewhere"]  # workers import this checkout


def test_engine_batch_invariant_sets_vllms_mode_over_an_exported_value():
    # the knob is in the answers' keys, so the environment may not make the answers other than it says
    env = {"VLLM_BATCH_INVARIANT": "1"}
    set_vllm_environment(1, env)
    assert env["VLLM_BATCH_INVARIANT"] == "0"
    set_vllm_environment(1, env, batch_invariant=True)
    assert env["VLLM_BATCH_INVARIANT"] == "1"


def test_the_engine_and_its_preload_pass_batch_invariant_to_the_environment(monkeypatch, tmp_path):
    import sys
    import types

    from randopt.engines import vllm_engine
    seen = []
    monkeypatch.setattr(vllm_engine, "set_vllm_environment",
                        lambda tp, batch_invariant=False: seen.append(batch_invariant))
    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=None))
    vllm_engine.VllmEngine.preload(1, batch_invariant=True)
    vllm_engine.VllmEngine.preload(1)

    class FakeLLM:
        def __init__(self, **options):
            pass

        def collective_rpc(self, method, args=()):
            return [{"rank": 0}]

        def get_tokenizer(self):
            return types.SimpleNamespace(bos_token_id=1, eos_token_id=2)

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=FakeLLM))
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text('{"max_position_embeddings": 4096}')
    vllm_engine.VllmEngine(str(model), gpu_memory_utilization=0.5, batch_invariant=True)
    assert seen == [True, False, True]


def test_llm_arguments_turn_prefix_caching_off():
    options = llm_options("/m", tensor_parallel_size=2, gpu_memory_utilization=0.67, enforce_eager=False,
                          trust_remote_code=False, max_model_len=2048, batch_size=256)
    assert options["enable_prefix_caching"] is False
    assert options["enforce_eager"] is False  # CUDA graphs stay on: the weights change in place
    assert options["worker_extension_cls"] == EXTENSION
    assert (options["tensor_parallel_size"], options["gpu_memory_utilization"], options["max_num_seqs"]) == (2, 0.67, 256)


def test_a_worker_process_of_its_own_is_asked_for_only_on_one_gpu():
    common = dict(gpu_memory_utilization=0.5, enforce_eager=False, trust_remote_code=False, max_model_len=2048,
                  batch_size=512)
    assert "distributed_executor_backend" not in llm_options("/m", tensor_parallel_size=1, **common)
    assert llm_options("/m", tensor_parallel_size=1, worker_process=True, **common)["distributed_executor_backend"] == "mp"
    # with several GPUs vLLM gives each worker a process anyway: its own choice stays
    assert "distributed_executor_backend" not in llm_options("/m", tensor_parallel_size=2, worker_process=True, **common)


def test_a_fixed_kv_cache_is_passed_only_when_asked_for():
    """kv_cache_memory_bytes makes vLLM skip its memory profiling (bench/engines_per_gpu --starts together)."""
    common = dict(tensor_parallel_size=1, gpu_memory_utilization=0.25, enforce_eager=False, trust_remote_code=False,
                  max_model_len=2048, batch_size=512)
    assert "kv_cache_memory_bytes" not in llm_options("/m", **common)
    assert llm_options("/m", kv_cache_memory_bytes=12.5 * 2**30, **common)["kv_cache_memory_bytes"] == 12.5 * 2**30


def test_engines_side_by_side_start_together_with_their_share_as_a_fixed_kv_cache(tmp_path):
    """VllmEngine.start_alongside: engines sharing one GPU build at once, each with a fixed KV cache of its share
    (the resident server then takes no start lock). The real 1.5B's weight bytes on the H100 (its total memory)
    give the 15.24 GiB KV cache the 2026-12-07 run started three engines with (its bench rounds to 0.01 GiB:
    bench/results/engines_per_gpu/engines_per_gpu_h100_qwen15b_mps_together3_warm.json, all up in 34.4 s)."""
    from randopt.engines.vllm_engine import VllmEngine
    model, h100 = weights(tmp_path, 3_554_214_752), 85_520_809_984
    options, why = VllmEngine.start_alongside(model, {"engines_per_gpu": 3, "gpu_memory_utilization": "auto"},
                                              card_bytes=h100)
    assert options == {"engines_per_gpu": 3, "gpu_memory_utilization": 0.258, "kv_cache_memory_bytes": 16_362_670_575}
    assert "3 engines share the GPU, each with a fixed 15.24 GiB KV cache" in why and "start lock" in why
    # one engine a GPU, an engine over several GPUs, a share too small for a fixed cache: in turn, as before
    for given in ({"engines_per_gpu": 1}, {"engines_per_gpu": 3, "tensor_parallel_size": 2},
                  {"engines_per_gpu": 3, "gpu_memory_utilization": 0.05}):
        assert VllmEngine.start_alongside(model, given, card_bytes=h100) == (given, None)


# --- perturbation.noise reaches every tensor-parallel worker ------------------------------------------

def test_the_engine_hands_its_noise_to_every_workers_setup(tmp_path, monkeypatch):
    """VllmEngine(noise=...) passes the kind to randopt_setup on every rank (a stand-in vllm module
    records the calls); an unknown kind fails before vLLM is imported."""
    import sys
    import types

    from randopt.engines import vllm_engine

    calls = []

    class FakeLLM:
        def __init__(self, **options):
            self.options = options

        def collective_rpc(self, method, args=()):
            calls.append((method, args))
            return [{"rank": 0}]

        def get_tokenizer(self):
            return types.SimpleNamespace(bos_token_id=1, eos_token_id=2)

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=FakeLLM))
    monkeypatch.setattr(vllm_engine, "set_vllm_environment", lambda tp, batch_invariant=False: None)
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text('{"max_position_embeddings": 4096}')
    engine = vllm_engine.VllmEngine(str(model), gpu_memory_utilization=0.5, noise="gaussian")
    assert calls == [("randopt_setup", (str(model), "gaussian"))] and engine.noise == "gaussian"
    calls.clear()
    vllm_engine.VllmEngine(str(model), gpu_memory_utilization=0.5)
    assert calls == [("randopt_setup", (str(model), "rademacher"))]
    monkeypatch.delitem(sys.modules, "vllm")
    with pytest.raises(ValueError, match="perturbation.noise is one of"):
        vllm_engine.VllmEngine(str(model), gpu_memory_utilization=0.5, noise="uniform")

