#!/usr/bin/env bash
# One device call: the speculation arms named on the command line, one process each, on one H200.
#   bash bench/speculation/arms_h200.sh TRAIN MEMBERS TAG:SPECULATION:DRAFT_TOKENS:MAX_TOKENS ...
#   SHAPE=qwen7b bash bench/speculation/arms_h200.sh ...   (the random 7B shape instead of SmolLM2)
#   MODEL_DIR=/tmp/q15b-prep/data/models/<key>/model DECODE_JSON=/tmp/q15b-prep/decode.json \
#     bash bench/speculation/arms_h200.sh /tmp/q15b-prep/data/problems/<key>/train.jsonl 16 none:none:8:512 suffix:suffix:24:512
#       (issue 48 item 5: the real 1.5B that bench/vllm's vllm026_h200 script prepares (part model), its reasoning
#       prompt, and vLLM's own suffix method from the arctic-inference wheel (build_arctic_wheel.sh here) in the
#       lease's bundle, which a suffix arm installs into /tmp/site-arctic and only its process sees)
# SmolLM2-135M-Instruct is converted once by the project's prepare_model stage into /tmp/spec/smollm2
# (kept while the machine stays warm); each arm's JSON goes to $OUT (bench/speculation/speculation.py).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../device_env.sh"
# jsonschema (the library's config checks) is not in the device image: bench/peers/install_wheels.sh puts it in /tmp/site
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
TRAIN=${1:?train JSONL}; MEMBERS=${2:?members per arm}; shift 2
OUT=${OUT:-/tmp/randopt-out}; mkdir -p "$OUT"
MODEL=/tmp/spec/smollm2
if [ -n "${MODEL_DIR:-}" ]; then
  MODEL=$(dirname "$MODEL_DIR")   # a prepared model dir: MODEL/model
elif [ "${SHAPE:-}" = qwen7b ]; then
  # the random-weight Qwen2.5-7B shape of bench/vllm/vllm_bench.py: it loops on nonsense, so its arms
  # measure what verification costs a GPU-bound step at batch 128, never acceptance (README)
  MODEL=/tmp/randopt-bench/qwen7b-shape
  python3 -c "from pathlib import Path; from bench.vllm.vllm_bench import build_random_7b; build_random_7b(Path('$MODEL/model'), None)" \
    > "$OUT/prepare.log" 2>&1 || { tail -20 "$OUT/prepare.log"; exit 1; }
elif [ ! -f $MODEL/model/config.json ]; then
  python3 -m randopt.stages.prepare_model --source gguf_wheel --model-id HuggingFaceTB/SmolLM2-135M-Instruct \
    --dtype bfloat16 --out-dir $MODEL/model --manifest $MODEL/manifest.json > "$OUT/prepare.log" 2>&1 \
    || { tail -20 "$OUT/prepare.log"; exit 1; }
fi
for arm in "$@"; do
  IFS=: read -r tag spec k maxtok <<< "$arm"
  echo "== $tag: speculation $spec, draft tokens $k, max_tokens $maxtok"
  path=$PYTHONPATH
  if [ "$spec" = suffix ]; then
    [ -d /tmp/site-arctic/arctic_inference ] || python3 -m pip install -q --no-index --no-deps --target /tmp/site-arctic \
      /tmp/x/arctic/arctic_inference-0.3.0-cp312-cp312-linux_x86_64.whl || { echo "ARM FAILED: $tag (no arctic wheel)"; continue; }
    path=/tmp/site-arctic:$PYTHONPATH
  fi
  PYTHONPATH=$path python3 bench/speculation/speculation.py arm --model-dir $MODEL/model --train "$TRAIN" --members "$MEMBERS" \
    --max-tokens "$maxtok" --speculation "$spec" --draft-tokens "$k" --tag "$tag" --out "$OUT" \
    ${DECODE_JSON:+--decode-json "$DECODE_JSON"} > "$OUT/$tag.log" 2>&1 || echo "ARM FAILED: $tag"
  grep -E "^member|Error|error" "$OUT/$tag.log" | tail -8
done
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1
