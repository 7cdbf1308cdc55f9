#!/usr/bin/env bash
# The standard's protocol, reduced, on a model of a real model's shape (random weights) through randopt's
# own workflow with vLLM, in ONE device call per layout (<= 600 s with the engine's start): 200/200
# problems, max_tokens 1024, sigma {5e-4, 1e-3, 2e-3} x 6 seeds = 18 members, the standard's top-k
# fractions. Then bench/standard/shape_summary.py times engine start, the switch per seed, members/s,
# evaluate_members and score_bpb per model, and extrapolates the wall time to 1,536 members
# (bench/standard/README.md says how). Writes to $OUT/<tag>/: <tag>.json, record.json, the vLLM dummy
# loader's source, the logs.
#   bash bench/standard/shape_run.sh                     # Qwen2.5-7B's shape on one GPU (tag shape_7b_tp1_gpus1)
#   SHAPE=72b TP=8 bash bench/standard/shape_run.sh      # Qwen2.5-72B's shape, 1 engine of TP 8 on 8 GPUs
#   SHAPE=72b TP=4 bash bench/standard/shape_run.sh      # 2 engines of TP 4 side by side on the 8 GPUs
#   SHAPE=72b TP=2 bash bench/standard/shape_run.sh      # 4 x TP 2: refused at DAG build on H200s (recorded)
#   GSM8K_DIR=gsm8k bash bench/standard/shape_run.sh     # real GSM8K from DIR/{train,test}.jsonl
#   TINY=1 bash bench/standard/shape_run.sh              # the CPU rehearsal: a tiny shape on the torch engine
# The protocol is bench/standard/shape_protocol.yaml; SHAPE adds bench/standard/shape_<SHAPE>.yaml (7b, 72b: the
# model, its layout and its shards); TP overrides that file's
# engine.tensor_parallel_size; GPUS (default: every GPU nvidia-smi lists) is Snakemake's gpu resource, so
# GPUS / TP engine jobs run at once, each on its own GPUs with its own resident engine. snakemake must
# be importable (PYTHONPATH=/tmp/site on the device).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../device_env.sh"
unset CUDA_VISIBLE_DEVICES
PY=${PYTHON:-python3}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
SHAPE=${SHAPE:-7b}
LIMIT_S=${LIMIT_S:-480}                     # the workflow's share of the call (~25 s more follow: vLLM's loader source, the summary)

if [ "${TINY:-0}" = 1 ]; then
  overlay=$REPO/bench/standard/shape_tiny.yaml; configs=("$overlay"); GPUS=0; TP=${TP:-1}; tag=${TAG:-shape_tiny_cpu}
  run=(--cores 2)
else
  overlay=$REPO/bench/standard/shape_$SHAPE.yaml
  configs=("$REPO/bench/standard/shape_protocol.yaml" "$overlay")
  [ -f "$overlay" ] || { echo "no overlay $overlay: SHAPE is one of $(cd "$REPO/bench/standard" && ls shape_*.yaml | sed 's/shape_\(.*\)\.yaml/\1/' | grep -v -e tiny -e protocol | tr '\n' ' ')" >&2; exit 2; }
  GPUS=${GPUS:-$(nvidia-smi --list-gpus 2>/dev/null | wc -l)}
  TP=${TP:-$(sed -n 's/.*tensor_parallel_size: *\([0-9]*\).*/\1/p' "$overlay" | head -1)}
  [ "$GPUS" -ge 1 ] || { echo "no GPU listed by nvidia-smi (TINY=1 rehearses on the CPU)" >&2; exit 2; }
  tag=${TAG:-shape_${SHAPE}_tp${TP}_gpus${GPUS}}
  run=(--scheduler greedy --cores "$(nproc)" --resources gpu="$GPUS")
fi
OUT=${OUT:-/tmp/randopt-out}/$tag; mkdir -p "$OUT"
WORK=${WORK:-/tmp/randopt-$tag}          # the run's folder (data/, results/, logs/)
t0=$(date +%s)
say() { echo "[$tag $(( $(date +%s) - t0 )) s] $*" | tee -a "$OUT/steps.txt"; }

printf 'engine: {tensor_parallel_size: %s}\n' "$TP" > "$OUT/layout_overlay.yaml"; configs+=("$OUT/layout_overlay.yaml")
if [ -n "${GSM8K_DIR:-}" ] && [ -f "$GSM8K_DIR/train.jsonl" ] && [ -f "$GSM8K_DIR/test.jsonl" ]; then
  printf 'gsm8k: {source: jsonl, jsonl: {path: %s}}\n' "$(cd "$GSM8K_DIR" && pwd)" > "$OUT/gsm8k_overlay.yaml"
  configs+=("$OUT/gsm8k_overlay.yaml"); say "GSM8K from $GSM8K_DIR"
else
  say "generated GSM8K-format problems (no GSM8K_DIR with train.jsonl and test.jsonl)"
fi
mkdir -p "$WORK"

"$PY" -c "import snakemake" 2>/dev/null || { say "FAILED: snakemake is not importable (PYTHONPATH=/tmp/site?)"; exit 1; }
say "workflow: TP $TP on $GPUS GPU(s): ${run[*]} --configfile ${configs[*]} (at most $LIMIT_S s)"
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
  --tensor-parallel-size "$TP" --gpus "$GPUS" --snakemake-log "$OUT/snakemake.log" \
  --out "$OUT/$tag.json" 2>&1 | tee -a "$OUT/steps.txt"
cp "$WORK/results/record.json" "$OUT/record.json" 2>/dev/null
tar -czf "$OUT/logs.tgz" -C "$WORK" logs .snakemake/engines 2>/dev/null
say "done"
