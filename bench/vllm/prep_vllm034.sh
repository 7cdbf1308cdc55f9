#!/usr/bin/env bash
# Host side of bench/vllm/vllm034_h200.sh (issue 71 item 1): vLLM 0.34.0 with torch 2.14 and the CUDA wheels torch
# 2.14 pins otherwise than the image's torch 2.11 (bench/vllm/requirements-vllm034.txt, hash-pinned) into
# WORK/vllm034, checked here before a lease pays for their carry:
#   - every nccl* function torch 2.14's libraries import is defined by the NCCL that travels (nccl_symbols.py);
#   - the wheels' bytes against bench/vllm/wheelhouse034.tsv;
# then packed with bench/real_model's wheels, model and data (bench/real_model/prep_host.sh: 0.25.0's set rides
# along, so both versions run in one lease) into .bundle's 55 MiB pieces, one device call each.
# Usage: bash bench/vllm/prep_vllm034.sh [WORK]     (default /tmp/vllm034-prep; ~3.7 GB downloaded, 2.3 GB of it here)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
WORK=${1:-/tmp/vllm034-prep}
mkdir -p "$WORK/vllm034"
PLAT=(); for p in manylinux_2_39_x86_64 manylinux_2_35_x86_64 manylinux_2_31_x86_64 manylinux_2_28_x86_64 \
                  manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 \
                  manylinux_2_5_x86_64; do PLAT+=(--platform "$p"); done
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${PLAT[@]}" \
  --require-hashes -r bench/vllm/requirements-vllm034.txt -d "$WORK/vllm034"
python3 - "$WORK/vllm034" <<'PY'
import sys
from pathlib import Path
want = dict(line.split("\t") for line in Path("bench/vllm/wheelhouse034.tsv").read_text().splitlines()[1:])
have = {p.name: str(p.stat().st_size) for p in Path(sys.argv[1]).glob("*.whl")}
extra, missing = set(have) - set(want), {n for n in want if have.get(n) != want[n].strip()}
if extra or missing:
    sys.exit(f"wheelhouse034.tsv: missing or other size {sorted(missing)}; not listed {sorted(extra)}")
print(f"{len(have)} wheels, {sum(map(int, have.values())):,} bytes")
PY
python3 bench/vllm/nccl_symbols.py "$WORK"/vllm034/torch-2.14.0-*.whl "$WORK"/vllm034/nvidia_nccl_cu13-*.whl
bash bench/real_model/prep_host.sh /tmp/real-prep "$WORK/vllm034"
