"""The member kernels (randopt/kernels/member_linear_triton.py) compiled for an H100 (sm_90) on this CPU: Triton's
compiler and ptxas need no GPU, so what only a compiled launch exercises (the ragged kernel's early return, the
pack kernel's reduce, the embedding gather, the fp32-X dot) is compiled here, and the Gaussian launches' PTX is read
for fused multiply-adds, which would round sigma*G + W0 once where the reference switch rounds twice (the
interpreter never fuses, so only compiled code can show it). Skipped, saying why, without Triton's CUDA backend or
under TRITON_INTERPRET=1."""
from __future__ import annotations

import importlib.util
import os

import pytest

if importlib.util.find_spec("triton") is None:
    pytest.skip("triton is not installed", allow_module_level=True)
if os.environ.get("TRITON_INTERPRET") == "1":
    pytest.skip("TRITON_INTERPRET=1: this compiles the kernels", allow_module_level=True)
try:
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    import triton
except ImportError as e:   # pragma: no cover - an older Triton
    pytest.skip(f"Triton's ahead-of-time compiler is not importable: {e}", allow_module_level=True)

from randopt.kernels import member_linear_triton as ML  # noqa: E402

if ML.INTERPRETED:
    pytest.skip("member_linear_triton was imported under the interpreter", allow_module_level=True)

TARGET = GPUTarget("cuda", 90, 32)
LINEAR_TYPES = {"x_ptr": "*bf16", "w_ptr": "*bf16", "y_ptr": "*bf16", "weff_ptr": "*bf16", "bias_ptr": "*bf16",
                "keys_ptr": "*i32", "table_ptr": "*i32", "row_slot_ptr": "*i32", "row_base_ptr": "*i64",
                "signs_ptr": "*i32", "seg_ptr": "*i32", "N": "i32", "K": "i32", "n_slots": "i32", "words": "i32",
                "stride_xr": "i32", "stride_wn": "i32", "stride_yr": "i32"}


def _compile(kernel, types: dict, constants: dict, **options):
    signature = {name: "constexpr" if name in constants else types[name] for name in kernel.arg_names}
    try:
        return triton.compile(ASTSource(kernel, signature, constexprs=constants), target=TARGET,
                              options={"num_warps": 4, **options})
    except (FileNotFoundError, RuntimeError) as e:
        if "ptxas" in str(e) or "nvidia" in str(e).lower():
            pytest.skip(f"no CUDA toolchain in this Triton: {e}")
        raise


def _linear(gauss: bool, signs: bool, emit: bool = False, x_f32: bool = False):
    constants = dict(GAUSS=gauss, SIGNS=signs, UNPACK_GATHER=False, HAS_BIAS=True, EMIT_W=emit, BF16_BY_HAND=False,
                     Y_BF16_BY_HAND=False, DOT_F32=x_f32, BLOCK_R=16, BLOCK_N=64, BLOCK_K=64)
    types = LINEAR_TYPES | ({"x_ptr": "*fp32", "y_ptr": "*fp32"} if x_f32 else {})
    return _compile(ML._member_linear_kernel, types, constants, num_stages=3,
                    **({"enable_fp_fusion": False} if gauss else {}))


def _has_fma(compiled) -> bool:
    ptx = compiled.asm["ptx"]
    return "fma.rn.f32" in ptx or "fma.f32" in ptx


def test_ragged_linear_compiles_and_gaussian_has_no_fma():
    assert _linear(gauss=False, signs=False).asm["ptx"]
    assert not _has_fma(_linear(gauss=True, signs=False, emit=True))


def test_packed_signs_paths_compile():
    assert _linear(gauss=False, signs=True, x_f32=True).asm["ptx"]
    types = {"signs_ptr": "*i32", "keys_ptr": "*i32", "row_slot_ptr": "*i32", "row_base_ptr": "*i64", "N": "i32",
             "K": "i32", "n_slots": "i32", "words": "i32"}
    assert _compile(ML._pack_signs_kernel, types, dict(BLOCK_N=32, BLOCK_W=8)).asm["ptx"]


def test_embedding_gather_compiles_and_gaussian_has_no_fma():
    types = {"out_ptr": "*bf16", "w_ptr": "*bf16", "ids_ptr": "*i64", "row_member_ptr": "*i32", "keys_ptr": "*i32",
             "table_ptr": "*i32", "H": "i32", "stride_wn": "i32", "stride_out": "i32"}
    compiled = _compile(ML._member_embedding_kernel, types, dict(GAUSS=True, BF16_BY_HAND=False, BLOCK_H=1024),
                        enable_fp_fusion=False)
    assert not _has_fma(compiled)
