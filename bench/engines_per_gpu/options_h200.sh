#!/usr/bin/env bash
# Engines side by side on one H200 with an engine option on (issue 28: engine.worker_process; issue 31:
# engine.speculation population), SmolLM2 on the 128 real GSM8K train prompts, in ONE device call:
#   bash bench/engines_per_gpu/options_h200.sh TAG [engines_per_gpu.py flags...]
#   bash bench/engines_per_gpu/options_h200.sh none512                              # the reference: no option
#   bash bench/engines_per_gpu/options_h200.sh spec512 --speculation population     # issue 31 with engines
#   bash bench/engines_per_gpu/options_h200.sh worker512 --worker-process           # issue 28 with engines
# Each sweeps 1, 2 and 3 engines (NS), max_tokens 512 (MAX_TOKENS), a 30 s window each (WINDOW), inside
# BUDGET seconds (540). Run the reference in the same lease: a ratio between leases mixes machines.
#   MPS=1 bash bench/engines_per_gpu/options_h200.sh mps512                        # engines under CUDA MPS
# MPS=1 runs the engines as clients of a CUDA MPS control daemon started for this call alone (its pipe and
# log folders under /tmp; stopped on exit). Without MPS the engines' kernels take turns on the GPU (time
# slicing: at 3 SmolLM2 engines it is 96 % busy with small kernels); under MPS kernels of different engines
# run at the same time on free SMs. The GPU's compute mode and other settings are not touched.
# Carry .gpu-snap. jsonschema (prepare_model's config checks) from /tmp/site when
# bench/peers/install_wheels.sh put it there. $OUT gets engines_per_gpu_smollm2_<TAG>.json.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../device_env.sh"
TAG=${1:?usage: options_h200.sh TAG [engines_per_gpu.py flags...]}; shift
OUT=${OUT:-/tmp/epg-out}; mkdir -p "$OUT"
export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}
TRAIN=${TRAIN:-.gpu-snap/gsm8k/train128.jsonl}
[ -f "$TRAIN" ] || { echo "$TRAIN is missing: carry .gpu-snap" >&2; exit 2; }
if [ "${MPS:-0}" = 1 ]; then
  command -v nvidia-cuda-mps-control >/dev/null || { echo "nvidia-cuda-mps-control is not on this machine: no MPS run" >&2; exit 3; }
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d || { echo "the MPS daemon did not start" >&2; exit 3; }
  trap 'echo quit | nvidia-cuda-mps-control; cp -r "$CUDA_MPS_LOG_DIRECTORY" "$OUT/mps-log" 2>/dev/null' EXIT
  echo "MPS daemon up (pipe $CUDA_MPS_PIPE_DIRECTORY)"
fi
python3 bench/engines_per_gpu/engines_per_gpu.py --model smollm2 --train "$TRAIN" --ns ${NS:-1 2 3} \
  --max-tokens "${MAX_TOKENS:-512}" --window "${WINDOW:-30}" --budget "${BUDGET:-540}" --work /tmp/epg-work \
  --tag "smollm2_$TAG" --out "$OUT" "$@" 2>&1 | tail -15
tar czf "$OUT/logs_$TAG.tgz" -C /tmp/epg-work logs 2>/dev/null
