"""A stub of the CUDA driver's library (libcuda.so.1), built from C at test time with the five entry points
randopt/runtime/cuda_driver.py calls and their real signatures: a process with its folder on LD_LIBRARY_PATH sees
two CUDA devices (an H100 and an H200) where no GPU is, for the tests of the driver probe and of a run's start."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.conftest import skip_unless_ci

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


def build_stub_driver(where: Path) -> Path:
    """The folder holding the stub's libcuda.so.1 (skips, or fails under CI, without a C compiler)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        skip_unless_ci("no C compiler to build the stub CUDA driver")
    where.mkdir(parents=True, exist_ok=True)
    (where / "stub.c").write_text(STUB)
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(where / "libcuda.so.1"), str(where / "stub.c")], check=True)
    return where
