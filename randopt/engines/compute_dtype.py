"""The dtype an engine computes in, chosen from the CPU when the config says `auto`.

A seed always means the same weights: the perturbation is computed in the checkpoint dtype,
W = rne(W0 + sigma*R), whatever the engine computes in. On a CPU without native bf16 matmul
(AVX2-only x86 such as AMD Zen 2/3 or older Intel), bf16 arithmetic is emulated and ~5x slower than
fp32, so `auto` widens those exact bf16 weights to fp32 there (without rounding) and computes in fp32.
Where the CPU has native bf16 (AVX512-BF16, AMX-BF16, or Arm's BF16 extension), bf16 is faster.

The choice changes the numbers (fp32 and bf16 greedy decoding differ), so the resolved dtype, never
`auto`, enters the output keys (randopt/keys.py) and the record. It is resolved on the host that
builds the DAG and passed to every job as a concrete dtype.

No torch import here: the workflow resolves it at DAG build, which must stay fast.
"""
from __future__ import annotations

import os
import platform
from collections.abc import Mapping
from dataclasses import dataclass, field

CHOICES = ("auto", "bfloat16", "float32")
X86_BF16_FLAGS = ("avx512_bf16", "amx_bf16")   # /proc/cpuinfo flags of native bf16 dot products
ARM_BF16_FLAG = "bf16"                          # /proc/cpuinfo Features of ARMv8.6 BF16
# oneDNN ISA caps (ONEDNN_MAX_CPU_ISA) that still allow its native bf16 kernels; any other cap
# (SSE41, AVX, AVX2, AVX2_VNNI, AVX512_CORE, AVX512_CORE_VNNI, ...) leaves bf16 emulated.
ONEDNN_BF16_ISAS = ("ALL", "AVX512_CORE_BF16", "AVX512_CORE_FP16", "AVX512_CORE_AMX", "AVX512_CORE_AMX_FP16",
                    "AVX10_1_512", "AVX10_1_512_AMX", "AVX10_1_512_AMX_FP16", "AVX10_2_512",
                    "AVX10_2_512_AMX_2")
# ATen capabilities (ATEN_CPU_CAPABILITY) below AVX512 route bf16 elementwise ops to emulation too.
ATEN_SLOW_CAPS = ("default", "avx2")


@dataclass(frozen=True)
class CpuInfo:
    model: str
    flags: frozenset[str] = field(default_factory=frozenset)
    machine: str = ""

    def as_dict(self) -> dict:
        wanted = set(X86_BF16_FLAGS) | {ARM_BF16_FLAG, "avx2", "avx512f", "avx512bw", "fma", "amx_tile"}
        return {"model": self.model, "machine": self.machine, "flags": sorted(self.flags & wanted)}


def read_cpu(cpuinfo_path: str = "/proc/cpuinfo") -> CpuInfo:
    """The CPU's model name and feature flags (Linux /proc/cpuinfo; elsewhere no flags)."""
    model, flags = platform.processor() or "unknown", set()
    try:
        with open(cpuinfo_path) as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip().lower()
                if key in ("model name", "cpu model") and model in ("unknown", "", platform.processor()):
                    model = value.strip()
                elif key in ("flags", "features") and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    return CpuInfo(model=model, flags=frozenset(flags), machine=platform.machine())


def native_bf16(cpu: CpuInfo, env: Mapping[str, str] = os.environ) -> tuple[bool, str]:
    """Whether bf16 matmul runs natively here, and why, naming the flags and any ISA cap."""
    if cpu.machine in ("aarch64", "arm64"):
        have = ARM_BF16_FLAG in cpu.flags
        return have, f"{cpu.model}: Arm BF16 extension {'present' if have else 'absent'} (cpuinfo feature 'bf16')"
    present = [f for f in X86_BF16_FLAGS if f in cpu.flags]
    if not present:
        return False, (f"{cpu.model}: no native bf16 matmul (cpu flags lack {' and '.join(X86_BF16_FLAGS)}; "
                       f"has {', '.join(sorted(cpu.flags & {'avx2', 'avx512f', 'avx512bw'})) or 'neither avx2 nor avx512'})")
    var = next((v for v in ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA") if env.get(v)), None)
    onednn_cap = env[var].strip().upper() if var else ""
    if onednn_cap and onednn_cap not in ONEDNN_BF16_ISAS:
        return False, (f"{cpu.model}: cpu flags have {', '.join(present)}, but {var}={onednn_cap} "
                       "caps oneDNN below its bf16 kernels")
    aten_cap = env.get("ATEN_CPU_CAPABILITY", "").strip().lower()
    if aten_cap in ATEN_SLOW_CAPS:
        return False, (f"{cpu.model}: cpu flags have {', '.join(present)}, but ATEN_CPU_CAPABILITY={aten_cap} "
                       "caps ATen below AVX512")
    return True, f"{cpu.model}: native bf16 matmul (cpu flags {', '.join(present)})"


def resolve(requested: str, *, engine: str, device: str, checkpoint_dtype: str,
            cpu: CpuInfo | None = None, env: Mapping[str, str] = os.environ) -> tuple[str, str]:
    """(dtype, why) for a requested compute dtype. Raises ValueError for a combination that would
    change what a seed means (computing narrower than the checkpoint) or that an engine cannot do."""
    if requested not in CHOICES:
        raise ValueError(f"engine.compute_dtype {requested!r}: choose one of {', '.join(CHOICES)}")
    if engine != "torch":
        if requested not in ("auto", checkpoint_dtype):
            raise ValueError(f"engine.compute_dtype {requested!r}: the {engine} engine computes in the checkpoint "
                             f"dtype ({checkpoint_dtype}); set engine.compute_dtype to auto")
        return checkpoint_dtype, f"the {engine} engine computes in the checkpoint dtype"
    if requested == "bfloat16" and checkpoint_dtype != "bfloat16":
        raise ValueError(f"engine.compute_dtype bfloat16 with a {checkpoint_dtype} checkpoint (model.dtype) would "
                         "round the perturbed weights, so a seed would mean other weights; use float32 or auto")
    if requested != "auto":
        return requested, f"engine.compute_dtype is {requested}"
    if checkpoint_dtype == "float32":
        return "float32", "auto: the checkpoint is float32"
    if not str(device).startswith("cpu") and (str(device).startswith("cuda") or _cuda_present()):
        return checkpoint_dtype, f"auto: the checkpoint dtype on a GPU (engine.device {device})"
    if checkpoint_dtype == "bfloat16":
        native, why = native_bf16(cpu or read_cpu(), env)
        return ("bfloat16", f"auto: {why}") if native else ("float32", f"auto: {why}; computing in float32")
    return "float32", f"auto: {checkpoint_dtype} has no fast CPU matmul; computing in float32"


def _cuda_present() -> bool:
    """device: auto uses CUDA when torch finds a GPU; without importing torch, an NVIDIA device node
    is the sign of one (a driver and a visible device)."""
    return os.path.exists("/dev/nvidia0") and os.environ.get("CUDA_VISIBLE_DEVICES", "x") != ""


def for_config(config: dict, cpu: CpuInfo | None = None, env: Mapping[str, str] = os.environ) -> tuple[str, str]:
    """The compute dtype of a validated config's engine, as the workflow's jobs will use it."""
    e = config["engine"]
    return resolve(e["compute_dtype"], engine=e["kind"], device=e["device"],
                   checkpoint_dtype=config["model"]["dtype"], cpu=cpu, env=env)
