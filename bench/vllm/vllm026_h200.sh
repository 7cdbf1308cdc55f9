#!/usr/bin/env bash
# vLLM 0.26.0 against the pinned 0.25.0 on one H200 (issue 48 item 4), one part per device call, after
# `bash bench/real_model/h200_qwen15b.sh install` with the bundle of bench/vllm/prep_vllm026.sh (it carries vLLM
# 0.26.0's two new wheels and the arctic-inference wheel beside bench/real_model's):
#   bash bench/vllm/vllm026_h200.sh install            0.26.0 into /tmp/site26, shadowing 0.25.0 in /tmp/site only there
#   bash bench/vllm/vllm026_h200.sh model              the 1.5B prepared and GSM8K's train split frozen in $PREP (~90 s)
#   bash bench/vllm/vllm026_h200.sh contract 026       the vLLM engine's GPU tests under a version (weights bit-exact
#                                                      after a switch, CUDA graphs kept, prompt_logprobs, TP layouts)
#   bash bench/vllm/vllm026_h200.sh members 025 026    one engine's members/s on the 1.5B, the versions in that order
#   bash bench/vllm/vllm026_h200.sh members 026 025    (and again the other way round: drift between runs shows)
# members: bench/engines_per_gpu/engines_per_gpu.py with one engine, 128 frozen GSM8K train problems, the overlay's
# reasoning prompt at 512 tokens, a 40 s window: engines_per_gpu_qwen15b_vllm<V>_<n>.json in $OUT, paired seed by seed on
# the host by bench/vllm/compare_versions.py. Move the pin in envs/requirements-gpu.txt only if 0.26.0 is faster in both
# orders and its contract passes (2026-12-06, H100: no faster, same answers; bench/vllm/README.md).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../device_env.sh"
T0=$(date +%s)
OUT=${OUT:-/tmp/vllm026-out}; mkdir -p "$OUT"
SITE=${SITE:-/tmp/site}
SITE26=/tmp/site26
PREP=${PREP:-/tmp/q15b-prep}
BUDGET=${BUDGET:-570}
log() { echo "[vllm026 $(( $(date +%s) - T0 )) s] $*"; }
path_of() {  # the PYTHONPATH of a version: 026 puts its two wheels before the 0.25.0 set
  case $1 in
    025) echo "$SITE:$PWD" ;;
    026) echo "$SITE26:$SITE:$PWD" ;;
    # 0.34.0 with torch 2.14 and its own transformers, installed by bench/vllm/vllm034_h200.sh
    034) echo "/tmp/site34:$SITE:$PWD" ;;
    *) echo "unknown version $1 (025, 026 or 034)" >&2; return 1 ;;
  esac
}
[ -f "$SITE/.real-model-installed" ] || { log "run bench/real_model/h200_qwen15b.sh install first"; exit 1; }

install() {
  ls /tmp/x/vllm026/*.whl > /dev/null 2>&1 || { log "no /tmp/x/vllm026: pack the bundle with bench/vllm/prep_vllm026.sh"; return 1; }
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE26" \
    /tmp/x/vllm026/*.whl || { log "INSTALL FAILED"; return 1; }
  for v in 025 026; do
    PYTHONPATH=$(path_of $v) python3 -c "import vllm, tvm_ffi; print('$v:', vllm.__version__, vllm.__file__)" || return 1
  done
}

model() {  # the workflow's own prepare_model and freeze_problems on the committed overlays, nothing else
  local gsm8k; gsm8k=$(cd ../shared/data/gsm8k && pwd) || { log "no GSM8K beside the checkout: run install"; return 1; }
  mkdir -p "$PREP"
  printf 'gsm8k:\n  jsonl: {path: %s}\n' "$gsm8k" > "$PREP/gsm8k.yaml"
  PYTHONPATH=$(path_of 025) timeout "$(left)" python3 -m snakemake --snakefile "$PWD/Snakefile" --directory "$PREP" \
    --cores 16 --configfile config/models/qwen2.5-coder-1.5b.yaml config/qwen15b_gsm8k.yaml "$PREP/gsm8k.yaml" \
    --resources gpu=1 --until prepare_model freeze_problems > "$OUT/model.log" 2>&1 || { tail -20 "$OUT/model.log"; return 1; }
  PYTHONPATH=$(path_of 025) python3 -c "import json, sys; from randopt.config import effective_config, decode_for; \
json.dump(decode_for(effective_config(sys.argv[1:])), open('$PREP/decode.json', 'w'))" \
    config/models/qwen2.5-coder-1.5b.yaml config/qwen15b_gsm8k.yaml "$PREP/gsm8k.yaml" || return 1
  ls -d "$PREP"/data/models/*/model "$PREP"/data/problems/*/train.jsonl
}

contract() {
  local v=$1
  PYTHONPATH=$(path_of "$v") timeout "$(left)" python3 -m pytest -v -p no:cacheprovider tests/test_engine_vllm.py \
    tests/test_vllm_layouts.py > "$OUT/contract_$v.log" 2>&1
  log "contract under $v: exit $? ($(grep -cE ' PASSED' "$OUT/contract_$v.log") passed, $(grep -cE ' (FAILED|ERROR)' "$OUT/contract_$v.log") failed)"
}

members() {
  local model train n=0
  model=$(ls -d "$PREP"/data/models/*/model 2>/dev/null | head -1); train=$(ls "$PREP"/data/problems/*/train.jsonl 2>/dev/null | head -1)
  [ -n "$model" ] && [ -n "$train" ] || { log "run the model part first"; return 1; }
  for v in "$@"; do
    n=$((n + 1))
    PYTHONPATH=$(path_of "$v") timeout "$(left)" python3 bench/engines_per_gpu/engines_per_gpu.py --model-dir "$model" \
      --train "$train" --ns 1 --prompt-json "$PREP/decode.json" --max-tokens 512 --window "${WINDOW:-40}" \
      --budget "$(left)" --work "/tmp/epg-$v" --tag "qwen15b_vllm${v}_$(date +%H%M%S)" --out "$OUT" 2>&1 | tail -4
    log "members under $v done"
  done
}

[ $# -gt 0 ] || { echo "usage: vllm026_h200.sh install | model | contract 025|026|034 | members 025|026|034 ..." >&2; exit 2; }
part=$1; shift
case $part in
  install) install ;;
  model) model ;;
  contract) for v in "${@:-026}"; do contract "$v"; done ;;
  members) [ $# -gt 0 ] || set -- 025 026; members "$@" ;;
  *) echo "unknown part $part" >&2; exit 2 ;;
esac
log "done"
