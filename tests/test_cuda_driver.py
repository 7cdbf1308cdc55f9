"""randopt/runtime/cuda_driver.py asks the CUDA driver's own API for the devices, without torch. No GPU runs here,
so the driver is a stub library built from C at test time with the five entry points the module calls and their
real signatures (CUDA's driver API, cuda.h): the C calling convention, the device handles, the name buffer and the
size_t of memory are exercised as ctypes makes them. That the real driver gives torch's names and bytes is the
GPU lease's to confirm (bench/README.md)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO, skip_unless_ci

# Handles are 10 + the ordinal, so that a caller passing the ordinal where the handle belongs reads nothing.
STUB = r"""
#include <stdlib.h>
#include <string.h>
#include <stddef.h>
static int initialized = 0;
static int fails(const char *what) { const char *f = getenv("STUB_CUDA_FAIL"); return f && !strcmp(f, what); }
int cuInit(unsigned int flags) { if (fails("init") || flags != 0) return 100; initialized = 1; return 0; }
int cuDeviceGetCount(int *count) {
    if (!initialized) return 3;
    const char *c = getenv("STUB_CUDA_COUNT"); *count = c ? atoi(c) : 2; return 0; }
int cuDeviceGet(int *device, int ordinal) { *device = 10 + ordinal; return 0; }
int cuDeviceGetName(char *name, int len, int device) {
    static const char *names[] = {"NVIDIA H100 80GB HBM3", "NVIDIA H200"};
    if (fails("name") || device < 10 || len < 32) return 101;
    strncpy(name, names[(device - 10) % 2], len); return 0; }
int cuDeviceTotalMem_v2(size_t *bytes, int device) {
    if (device < 10) return 101;
    *bytes = device == 10 ? 85520809984ULL : 150754820096ULL; return 0; }
"""
PROBE = ("import json, sys; from randopt.runtime import cuda_driver; from randopt.plan.host import Host; "
         "from randopt.records.assemble import hardware; h = Host(probe_card=True); "
         "print(json.dumps([cuda_driver.devices(), h.gpu0_bytes(), h.gpu0_name(), hardware()['gpus'], "
         "'torch' in sys.modules]))")


@pytest.fixture(scope="module")
def stub_driver(tmp_path_factory):
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        skip_unless_ci("no C compiler to build the stub CUDA driver")
    where = tmp_path_factory.mktemp("stub_cuda")
    (where / "stub.c").write_text(STUB)
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(where / "libcuda.so.1"), str(where / "stub.c")], check=True)
    return where


def probe(stub_driver, **env) -> list:
    import os
    run_env = {**os.environ, "LD_LIBRARY_PATH": str(stub_driver), **env}
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, capture_output=True, text=True, env=run_env, check=True)
    return json.loads(out.stdout)


def test_the_driver_names_each_device_and_its_memory_in_order_without_torch(stub_driver):
    devices, gpu0_bytes, gpu0_name, gpus, imported_torch = probe(stub_driver)
    assert devices == [["NVIDIA H100 80GB HBM3", 85520809984], ["NVIDIA H200", 150754820096]]
    assert (gpu0_bytes, gpu0_name) == (85520809984, "NVIDIA H100 80GB HBM3")   # the plan's card: GPU 0's
    assert gpus == ["NVIDIA H100 80GB HBM3", "NVIDIA H200"]                    # the record's hardware
    assert imported_torch is False


@pytest.mark.parametrize("env", [{"STUB_CUDA_FAIL": "init"}, {"STUB_CUDA_COUNT": "0"}, {"STUB_CUDA_FAIL": "name"}],
                         ids=["driver-does-not-initialize", "no-device-visible", "a-device-not-described"])
def test_a_driver_that_cannot_answer_means_no_usable_cuda(stub_driver, env):
    """As torch would count it: no card for the plan, none in the record, and still no torch."""
    assert probe(stub_driver, **env) == [[], None, None, [], False]
