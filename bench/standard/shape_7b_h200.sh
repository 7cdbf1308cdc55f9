#!/usr/bin/env bash
# The standard's protocol, reduced, on Qwen2.5-7B's shape (random weights) through randopt's own workflow
# with vLLM on one H200, in ONE device call (<= 550 s with the engine's start): 200/200 problems,
# max_tokens 1024, sigma {5e-4, 1e-3, 2e-3} x 6 seeds = 18 members, the standard's top-k fractions.
# Then bench/standard/shape_summary.py times engine start, the switch per seed, members/s,
# evaluate_members and score_bpb per model, and extrapolates the wall time to 1,536 members
# (bench/standard/README.md says how). Writes to $OUT: shape_7b_h200.json, record.json, the vLLM
# dummy loader's source, the logs.
#   bash bench/standard/shape_7b_h200.sh              # on the device, snakemake importable (PYTHONPATH)
#   GSM8K_DIR=gsm8k bash bench/standard/shape_7b_h200.sh   # real GSM8K from DIR/{train,test}.jsonl
#   TINY=1 bash bench/standard/shape_7b_h200.sh       # the CPU rehearsal: a tiny shape on the torch engine
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../device_env.sh"
unset CUDA_VISIBLE_DEVICES
OUT=${OUT:-/tmp/randopt-out}; mkdir -p "$OUT"
PY=${PYTHON:-python3}
WORK=${WORK:-/tmp/randopt-shape7b}          # the run's folder (data/, results/, logs/)
LIMIT_S=${LIMIT_S:-480}                     # the workflow's share of the call (~25 s more follow: vLLM's loader source, the summary)
REPO=$(cd "$(dirname "$0")/../.." && pwd)
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
t0=$(date +%s)
say() { echo "[shape7b $(( $(date +%s) - t0 )) s] $*" | tee -a "$OUT/steps.txt"; }

if [ "${TINY:-0}" = 1 ]; then
  overlay=$REPO/bench/standard/shape_7b_tiny.yaml; tag=shape_tiny_cpu; run=(--cores 2)
else
  overlay=$REPO/bench/standard/shape_7b_h200.yaml; tag=shape_7b_h200; run=(--scheduler greedy --cores 16 --resources gpu=1)
fi
configs=("$overlay")
if [ -n "${GSM8K_DIR:-}" ] && [ -f "$GSM8K_DIR/train.jsonl" ] && [ -f "$GSM8K_DIR/test.jsonl" ]; then
  printf 'gsm8k: {source: jsonl, jsonl: {path: %s}}\n' "$(cd "$GSM8K_DIR" && pwd)" > "$OUT/gsm8k_overlay.yaml"
  configs+=("$OUT/gsm8k_overlay.yaml"); say "GSM8K from $GSM8K_DIR"
else
  say "generated GSM8K-format problems (no GSM8K_DIR with train.jsonl and test.jsonl)"
fi
mkdir -p "$WORK"

"$PY" -c "import snakemake" 2>/dev/null || { say "FAILED: snakemake is not importable (PYTHONPATH=/tmp/site?)"; exit 1; }
say "workflow: ${run[*]} --configfile ${configs[*]} (at most $LIMIT_S s)"
timeout "$LIMIT_S" "$PY" -m snakemake --snakefile "$REPO/Snakefile" --directory "$WORK" "${run[@]}" \
  --configfile "${configs[@]}" > "$OUT/snakemake.log" 2>&1
rc=$?
say "workflow exit $rc$([ $rc = 124 ] && echo ' (cut at the limit: the summary extrapolates from what finished)')"
"$PY" -m randopt.runtime.resident.server stop "$WORK/.snakemake/engines" >> "$OUT/steps.txt" 2>&1

# How vLLM draws a shape model's weights (load_format dummy): its own source, for docs/gpu.md.
if [ "${TINY:-0}" != 1 ]; then
  "$PY" - > "$OUT/vllm_dummy_loader.txt" 2>&1 <<'PYEOF'
import inspect, vllm
from vllm.model_executor.model_loader import weight_utils as w
print("vllm", vllm.__version__)
for name in ("initialize_dummy_weights", "initialize_single_dummy_weight"):
    if hasattr(w, name):
        print(inspect.getsource(getattr(w, name)))
PYEOF
  say "vLLM's dummy loader source -> vllm_dummy_loader.txt ($(head -1 "$OUT/vllm_dummy_loader.txt"))"
fi
"$PY" "$REPO/bench/standard/shape_summary.py" --workdir "$WORK" --workflow-rc "$rc" --wall-s "$(( $(date +%s) - t0 ))" \
  --out "$OUT/$tag.json" 2>&1 | tee -a "$OUT/steps.txt"
cp "$WORK/results/record.json" "$OUT/record.json" 2>/dev/null
tar -czf "$OUT/logs.tgz" -C "$WORK" logs .snakemake/engines 2>/dev/null
say "done"
