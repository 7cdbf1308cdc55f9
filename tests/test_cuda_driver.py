"""randopt/runtime/cuda_driver.py asks the CUDA driver's own API for the devices, without torch. No GPU runs here,
so the driver is a stub library built from C at test time with the five entry points the module calls and their
real signatures (CUDA's driver API, cuda.h): the C calling convention, the device handles, the name buffer and the
size_t of memory are exercised as ctypes makes them. That the real driver gives torch's names and bytes is the
GPU lease's to confirm (bench/README.md)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO
from tests.support.stub_cuda import build_stub_driver

PROBE = ("import json, sys; from randopt.runtime import cuda_driver; from randopt.plan.host import Host; "
         "from randopt.records.assemble import hardware; h = Host(probe_card=True); "
         "print(json.dumps([cuda_driver.devices(), h.gpu0_bytes(), h.gpu0_name(), hardware()['gpus'], "
         "'torch' in sys.modules]))")


@pytest.fixture(scope="module")
def stub_driver(tmp_path_factory):
    return build_stub_driver(tmp_path_factory.mktemp("stub_cuda"))


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
