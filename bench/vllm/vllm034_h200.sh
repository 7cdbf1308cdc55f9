#!/usr/bin/env bash
# vLLM 0.34.0 with torch 2.14 on the device (issue 71 item 1), beside the pinned 0.25.0, after
# `bash bench/real_model/h200_qwen15b.sh install` with the bundle of bench/vllm/prep_vllm034.sh:
#   bash bench/vllm/vllm034_h200.sh install     the 42 wheels into /tmp/site34, which shadows the image's torch 2.11
#                                               and /tmp/site's 0.25.0 set on PYTHONPATH only (path_of 034 in
#                                               vllm026_h200.sh), then checks what loads
# then, with bench/vllm/vllm026_h200.sh (it knows 025, 026 and 034): model, contract 034, members 025 034 and
# members 034 025, as for 0.26.0 (bench/vllm/README.md).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../device_env.sh"
T0=$(date +%s)
SITE34=${SITE34:-/tmp/site34}
log() { echo "[vllm034 $(( $(date +%s) - T0 )) s] $*"; }

install() {
  ls /tmp/x/vllm034/*.whl > /dev/null 2>&1 || { log "no /tmp/x/vllm034: pack the bundle with bench/vllm/prep_vllm034.sh"; return 1; }
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE34" \
    /tmp/x/vllm034/*.whl || { log "INSTALL FAILED"; return 1; }
  # torch 2.14's libraries find CUDA through RPATHs relative to themselves ($ORIGIN/../../nvidia/cu13/lib, .../nvshmem/
  # lib): the components both torches pin alike stay the image's, so link them in where /tmp/site34 has none
  local image; image=$(python3 -c "import os, nvidia; print(os.path.dirname(list(nvidia.__path__)[0]))")
  for dir in "$image"/nvidia/*/lib; do
    local sub=${dir#"$image"/}
    mkdir -p "$SITE34/$sub"
    for lib in "$dir"/*; do [ -e "$SITE34/$sub/$(basename "$lib")" ] || ln -s "$lib" "$SITE34/$sub/"; done
  done
  python3 -m compileall -q -j 0 "$SITE34" > /dev/null; log "compiled $SITE34's bytecode"
  # what the set promises: torch 2.14 on the GPU with the carried cuDNN and NCCL, triton 3.8, vLLM 0.34's engine
  PYTHONPATH=$SITE34:/tmp/site:$PWD python3 - <<'PY' || { log "CHECK FAILED"; return 1; }
import torch, triton, transformers, vllm
from vllm import LLM  # noqa: F401  (the engine's import)
assert torch.__version__.startswith("2.14.0"), torch.__version__
assert torch.cuda.is_available(), "torch 2.14 sees no GPU"
x = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16)
torch.testing.assert_close((x @ x).float(), x.float() @ x.float(), atol=2.0, rtol=0.05)  # cuBLAS loads and runs
print("torch", torch.__version__, "cudnn", torch.backends.cudnn.version(), "nccl", torch.cuda.nccl.version(),
      "triton", triton.__version__, "transformers", transformers.__version__, "vllm", vllm.__version__, vllm.__file__)
PY
  log "installed"
}

[ "${1:-}" = install ] || { echo "usage: vllm034_h200.sh install   (the rest: bench/vllm/vllm026_h200.sh ... 034)" >&2; exit 2; }
install
