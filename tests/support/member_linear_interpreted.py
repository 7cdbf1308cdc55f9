"""randopt/kernels/member_linear_triton.py executed under the Triton interpreter, once a test session.

TRITON_INTERPRET is read when a function is decorated with triton.jit, so (as test_kernel_triton.py does) this
executes its own copies of perturb_triton.py (whose device function the member kernel calls) and
member_linear_triton.py with the interpreter on, and restores the variable and the imported modules at once: the
rest of the session keeps the ordinary modules. Shared by the member-linear and member-fused tests, so the copy is
made once."""
from __future__ import annotations

import importlib
import importlib.util
import os
import pathlib
import sys

_KERNELS = pathlib.Path(__file__).resolve().parents[2] / "randopt" / "kernels"


def _exec(path: pathlib.Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _load_interpreted():
    """member_linear_triton executed with the interpreter on, over an interpreted perturb_triton."""
    previous_env = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    package = importlib.import_module("randopt.kernels")
    key = "randopt.kernels.perturb_triton"
    saved_module, saved_attr = sys.modules.get(key), getattr(package, "perturb_triton", None)
    try:
        switch = _exec(_KERNELS / "perturb_triton.py", "randopt.kernels._perturb_triton_for_member_linear")
        sys.modules[key], package.perturb_triton = switch, switch
        return _exec(_KERNELS / "member_linear_triton.py", "randopt.kernels._member_linear_triton_interpreted")
    finally:
        if saved_module is None:
            sys.modules.pop(key, None)
        else:
            sys.modules[key] = saved_module
        if saved_attr is None:
            vars(package).pop("perturb_triton", None)
        else:
            package.perturb_triton = saved_attr
        if previous_env is None:
            del os.environ["TRITON_INTERPRET"]
        else:
            os.environ["TRITON_INTERPRET"] = previous_env


ML = _load_interpreted()
