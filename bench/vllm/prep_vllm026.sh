#!/usr/bin/env bash
# Host side of bench/vllm/vllm026_h200.sh and of the suffix arms of bench/speculation/arms_h200.sh (issue 48 items
# 4 and 5): the wheels vLLM 0.26.0 adds to the 0.25.0 wheelhouse (bench/vllm/requirements-vllm026.txt against
# ../shared/tools/vllm-wheelhouse/requirements.txt: vllm and apache-tvm-ffi) into WORK/vllm026, the arctic-inference
# wheel built here into WORK/arctic (bench/speculation/build_arctic_wheel.sh), both packed into .bundle with
# bench/real_model's wheels, model and data (bench/real_model/prep_host.sh), so that one install serves every part.
# Usage: bash bench/vllm/prep_vllm026.sh [WORK]     (default /tmp/vllm026-prep; needs a Python 3.12 as PYTHON312)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
WORK=${1:-/tmp/vllm026-prep}
SHARED=${SHARED:-../shared}
rm -rf "$WORK/all" "$WORK/vllm026" && mkdir -p "$WORK/all" "$WORK/vllm026" "$WORK/arctic"
PLAT=(); for p in manylinux_2_39_x86_64 manylinux_2_35_x86_64 manylinux_2_28_x86_64 manylinux_2_27_x86_64 \
                  manylinux_2_24_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64; do PLAT+=(--platform "$p"); done
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${PLAT[@]}" \
  --require-hashes -r bench/vllm/requirements-vllm026.txt -d "$WORK/all"
# only what the 0.25.0 wheelhouse lacks: the same name at another version
python3 - "$WORK" "$SHARED/tools/vllm-wheelhouse/requirements.txt" <<'PY'
import shutil, sys
from pathlib import Path
work, old = Path(sys.argv[1]), sys.argv[2]
pins = lambda path: {l.split()[0] for l in open(path) if l.strip() and not l.startswith("#")}
new = pins("bench/vllm/requirements-vllm026.txt") - pins(old)
for pin in sorted(new):
    name, version = pin.split("==")
    wheel, = (work / "all").glob(f"{name.replace('-', '_')}-{version}-*.whl")
    shutil.copy(wheel, work / "vllm026")
    print("vllm026:", wheel.name)
PY
# a Python 3.12 that runs: pyenv's python3.12 shim fails unless 3.12 is its selected version, so ask pyenv for it
PY312=${PYTHON312:-python3.12}
"$PY312" -V > /dev/null 2>&1 || PY312=$(PYENV_VERSION=$(pyenv versions --bare 2>/dev/null | grep -m1 '^3\.12') \
  pyenv which python3.12 2>/dev/null) || { echo "no Python 3.12: set PYTHON312" >&2; exit 1; }
[ -f "$WORK"/arctic/arctic_inference-0.3.0-cp312-cp312-linux_x86_64.whl ] \
  || bash bench/speculation/build_arctic_wheel.sh "$WORK/arctic" "$PY312"
bash bench/real_model/prep_host.sh /tmp/real-prep "$WORK/vllm026" "$WORK/arctic"
