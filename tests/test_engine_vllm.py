"""The engine contract on the vLLM engine. Needs vllm and a CUDA GPU (the H200 runs it through
bench/vllm/vllm_verify.py); on a CPU machine it is skipped, saying why."""
import importlib.util

import pytest

torch = pytest.importorskip("torch")
if importlib.util.find_spec("vllm") is None:
    pytest.skip("vllm is not installed (GPU machines only; see docs/gpu.md)", allow_module_level=True)
if not torch.cuda.is_available():
    pytest.skip("no CUDA device: the vLLM engine runs on GPUs only", allow_module_level=True)

from randopt.engines.factory import make_engine  # noqa: E402
from tests.support.engine_contract import *  # noqa: E402,F401,F403  (the contract's tests run here)


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    return make_engine("vllm", str(tiny_model_dir), gpu_memory_utilization=0.3, max_context=256)
