"""The guard of the tests of compiled Triton kernels: they need a CUDA device and Triton, and not the interpreter
(TRITON_INTERPRET=1 runs numpy instead of the compiled code). Called at a test module's top, it skips the module,
saying why."""
from __future__ import annotations

import importlib.util
import os

import pytest


def require_compiled_triton() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the compiled kernels run on GPUs only", allow_module_level=True)
    if importlib.util.find_spec("triton") is None:
        pytest.skip("triton is not installed", allow_module_level=True)
    if os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("TRITON_INTERPRET=1: these tests are about the compiled kernels", allow_module_level=True)
