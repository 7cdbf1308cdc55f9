#!/usr/bin/env bash
# Builds the cp312 wheel of arctic-inference 0.3.0 on a CPU host (issue 48 item 5). The package index has only its
# source distribution, and vLLM's own "suffix" speculative method imports arctic_inference.suffix_decoding from it;
# the GPU machine has no network and no build tools to make it there. Its one native part, suffix_decoding._C, is
# plain C++20 through nanobind (no CUDA, no torch link), so a CPU host builds the same extension; setup.py imports
# torch only to pass its CMake path, hence torch 2.11.0 in the build venv (the H200's version).
#   bash bench/speculation/build_arctic_wheel.sh OUTDIR [PYTHON]     (PYTHON: a Python 3.12, default python3.12)
# OUTDIR gets arctic_inference-0.3.0-cp312-cp312-linux_x86_64.whl; the script then imports the wheel and drafts from a
# suffix tree once, on the CPU. Keep OUTDIR in an ignored folder (.git/info/exclude) and carry it to the device.
set -euo pipefail
OUT=$(mkdir -p "${1:?usage: build_arctic_wheel.sh OUTDIR [PYTHON]}" && cd "$1" && pwd)
PY=${2:-python3.12}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
"$PY" -c 'import sys; assert sys.version_info[:2] == (3, 12), f"need Python 3.12, got {sys.version}"'
"$PY" -m venv "$WORK/venv"
# CMake's FindPython takes the first python3 on PATH (setup.py passes only the old PYTHON_EXECUTABLE): the venv's
export PATH="$WORK/venv/bin:$PATH"
pip install -q "setuptools>=61,<82" wheel ninja "cmake>=3.18" nanobind==2.9.2 protobuf==5.29.6 grpcio-tools numpy \
  torch==2.11.0
pip download -q --no-deps --no-binary=:all: --no-build-isolation arctic-inference==0.3.0 -d "$WORK/sdist"
pip wheel -q --no-deps --no-build-isolation "$WORK"/sdist/arctic_inference-0.3.0.tar.gz -w "$OUT"
wheel=$(ls "$OUT"/arctic_inference-0.3.0-cp312-cp312-linux_x86_64.whl)
pip install -q --no-deps --target "$WORK/site" "$wheel"
PYTHONPATH="$WORK/site" python - <<'PY'
from arctic_inference.suffix_decoding import SuffixDecodingCache
cache = SuffixDecodingCache(max_tree_depth=24, max_cached_requests=100)
cache.start_request("a", [1, 2, 3, 4, 5, 6, 7])
cache.add_active_response("a", [4, 5, 6, 7, 4, 5, 6])
draft = cache.speculate("a", [1, 2, 3, 4, 5, 6, 7, 4, 5, 6, 7, 4], max_spec_tokens=8)
assert draft.token_ids[:3] == [5, 6, 7], draft
print("suffix_decoding drafts:", draft.token_ids)
PY
sha256sum "$wheel"
