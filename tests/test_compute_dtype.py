"""engine.compute_dtype: auto picks bf16 only where the CPU multiplies bf16 natively, and says why."""
import pytest

from randopt.config import ConfigError, validate
from randopt.engines.compute_dtype import CpuInfo, native_bf16, read_cpu, resolve
from randopt.keys import run_keys

ZEN3 = CpuInfo("AMD EPYC 7B13", frozenset({"avx2", "fma"}), "x86_64")
ZEN4 = CpuInfo("AMD EPYC 9B14", frozenset({"avx2", "avx512f", "avx512bw", "avx512_bf16"}), "x86_64")
SPR = CpuInfo("Intel Xeon Platinum 8480+", frozenset({"avx2", "avx512f", "amx_bf16", "amx_tile"}), "x86_64")
GRAVITON3 = CpuInfo("Neoverse-V1", frozenset({"asimd", "bf16"}), "aarch64")


def auto(cpu, env=None, device="cpu", checkpoint="bfloat16", engine="torch"):
    return resolve("auto", engine=engine, device=device, checkpoint_dtype=checkpoint, cpu=cpu, env=env or {})


def test_auto_is_bf16_only_with_native_bf16_matmul():
    assert auto(ZEN3)[0] == "float32"
    assert auto(ZEN4)[0] == "bfloat16"
    assert auto(SPR)[0] == "bfloat16"
    assert auto(GRAVITON3)[0] == "bfloat16"
    assert auto(CpuInfo("Neoverse-N1", frozenset({"asimd"}), "aarch64"))[0] == "float32"


def test_the_reason_names_the_cpu_and_its_flags():
    dtype, why = auto(ZEN3)
    assert "AMD EPYC 7B13" in why and "avx512_bf16" in why and "amx_bf16" in why and "avx2" in why
    assert "avx512_bf16" in auto(ZEN4)[1]


@pytest.mark.parametrize("env", [{"ONEDNN_MAX_CPU_ISA": "AVX2"}, {"DNNL_MAX_CPU_ISA": "avx512_core"},
                                 {"ATEN_CPU_CAPABILITY": "avx2"}])
def test_an_isa_cap_below_bf16_means_float32(env):
    dtype, why = auto(ZEN4, env)
    assert dtype == "float32" and next(iter(env)) in why


def test_an_isa_cap_that_keeps_bf16_keeps_bf16():
    assert auto(SPR, {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_AMX"})[0] == "bfloat16"


def test_gpu_and_fp32_checkpoints_and_explicit_choices():
    assert auto(ZEN3, device="cuda")[0] == "bfloat16"
    assert auto(ZEN3, checkpoint="float32")[0] == "float32"
    assert auto(ZEN3, checkpoint="float16")[0] == "float32"
    assert resolve("bfloat16", engine="torch", device="cpu", checkpoint_dtype="bfloat16", cpu=ZEN3, env={})[0] == "bfloat16"
    assert auto(ZEN3, engine="vllm", device="cuda")[0] == "bfloat16"


@pytest.mark.parametrize("requested,engine,checkpoint,match", [
    ("bfloat16", "torch", "float32", "would round the perturbed weights"),
    ("float32", "vllm", "bfloat16", "computes in the checkpoint dtype"),
    ("float64", "torch", "bfloat16", "choose one of"),
])
def test_bad_combinations_are_clear_errors(requested, engine, checkpoint, match):
    with pytest.raises(ValueError, match=match):
        resolve(requested, engine=engine, device="cpu", checkpoint_dtype=checkpoint, cpu=ZEN3, env={})


def test_config_validation_refuses_them_before_any_job():
    with pytest.raises(ConfigError, match="engine.compute_dtype"):
        validate({"engine": {"kind": "vllm", "device": "cuda", "compute_dtype": "float32"}})


def test_the_resolved_dtype_enters_the_keys(monkeypatch):
    cfg = validate({})
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")   # float32 on every CPU
    capped = run_keys(cfg)
    as_f32 = run_keys(validate({"engine": {"compute_dtype": "float32"}}))
    as_bf16 = run_keys(validate({"engine": {"compute_dtype": "bfloat16"}}))
    assert capped["eval"] == as_f32["eval"] != as_bf16["eval"]
    assert capped["bpb"] == as_f32["bpb"] != as_bf16["bpb"]
    assert capped["model"] == as_bf16["model"] and capped["problems"] == as_bf16["problems"]


def test_this_machine_is_read():
    cpu = read_cpu()
    assert cpu.model and cpu.machine
    native, why = native_bf16(cpu, {})
    assert cpu.model in why
