#!/usr/bin/env bash
# Issue 29's larger protocol on one H200, in one device call (bench/distill/README.md, "On one H200"):
# the real workflow (Snakemake) with bench/distill/h200.yaml: SmolLM2-135M-Instruct on 128 real GSM8K train
# and 512 test problems, a vLLM search of 64 members, distill_data (the top 8's correct completions; the
# control sampled by vLLM), both LoRA fine-tunes in transformers on the GPU (bf16 autocast), both merged
# models served by vLLM for their test answers and bpb, and the record with its intervals.
#
# Before: vLLM 0.25.0 installed (../shared/tools/vllm-wheelhouse), snakemake + jsonschema (+ peft, if the
# image's does not import) wheels installed with `pip install --no-index --no-deps --target /tmp/site`, and
# the GSM8K slice carried as data/gsm8k-slice (host: python bench/distill/prep_gsm8k_slice.py).
#   bash bench/distill/h200_protocol.sh            (from the repo root; LIMIT=520 seconds for the workflow)
# A second call on a warm machine resumes: Snakemake reruns only what is missing.
# $OUT gets: summary.txt, snakemake.log, record.json, distill.png, distill_h200_smollm2.json, logs.tgz.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../device_env.sh"
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
unset CUDA_VISIBLE_DEVICES
OUT=${OUT:-/tmp/randopt-out}; mkdir -p "$OUT"
LIMIT=${LIMIT:-520}
CONFIG=${CONFIG:-bench/distill/h200.yaml}
NEED=${NEED:-snakemake jsonschema peft vllm}   # a CPU check of this script: NEED="snakemake jsonschema peft" CONFIG=... EXTRA=-n
PY=${PYTHON:-python3}
log() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$OUT/summary.txt"; }

log "host: $(nproc) cores; $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | head -1)"
log "versions: $($PY - <<'PY' 2>&1
import importlib, importlib.metadata
out = []
for name in ("torch", "transformers", "peft", "accelerate", "vllm", "snakemake", "jsonschema"):
    try:
        importlib.import_module(name)
        out.append(f"{name} {importlib.metadata.version(name)}")
    except Exception as err:
        out.append(f"{name} MISSING ({type(err).__name__}: {err})")
print("; ".join(out))
PY
)"
if [ ! -s data/gsm8k-slice/train.jsonl ] || [ ! -s data/gsm8k-slice/test.jsonl ]; then
  log "no data/gsm8k-slice: run 'python bench/distill/prep_gsm8k_slice.py' on the host and carry data/gsm8k-slice"
  exit 2
fi
if ! $PY -c "import ${NEED// /, }" 2>> "$OUT/summary.txt"; then
  log "a package is missing (see above): install the wheels into /tmp/site first (bench/distill/README.md)"
  exit 2
fi

t0=$(date +%s)
log "workflow: snakemake results/record.json, at most $LIMIT s"
timeout -k 15 "$LIMIT" $PY -m snakemake --cores 16 --resources gpu=1 --scheduler greedy --configfile "$CONFIG" \
  --rerun-incomplete ${EXTRA:-} results/record.json results/figures/distill.png > "$OUT/snakemake.log" 2>&1
rc=$?
log "snakemake rc=$rc after $(( $(date +%s) - t0 )) s (124: the time limit; call again to resume)"
$PY -m randopt.runtime.resident.server stop .snakemake/engines >> "$OUT/summary.txt" 2>&1 || true

grep -E "^(\[|Finished|Error|localrule|rule )" "$OUT/snakemake.log" | tail -60 >> "$OUT/summary.txt"
$PY bench/distill/measure.py --run-dir . --out "$OUT/distill_h200_smollm2.json" >> "$OUT/summary.txt" 2>&1 \
  || log "measure.py failed (no finished distillation job?)"
cp results/record.json "$OUT/record.json" 2>/dev/null || log "no record (the run did not finish)"
cp results/figures/distill.png "$OUT/distill.png" 2>/dev/null || true
tar -czf "$OUT/logs.tgz" logs results/benchmarks .snakemake/engines/*.log \
  $(find results/distill -name "manifest.json" -o -name "result.json" 2>/dev/null) \
  $(find results/distill -name "*.jsonl" 2>/dev/null) 2>/dev/null
$PY - <<'PY' 2>&1 | tee -a "$OUT/summary.txt"
import json
from pathlib import Path
record = Path("results/record.json")
if record.is_file():
    r = json.loads(record.read_text())
    print("timings_s:", json.dumps(r["timings_s"]))
    for rnd in r.get("distill", {}).get("rounds", []):
        print(json.dumps({k: rnd[k] for k in ("round", "k", "sizes", "test_accuracy", "bpb", "intervals")}, indent=1))
else:  # what finished: each distillation manifest
    for p in sorted(Path("results/distill").rglob("manifest.json")):
        m = json.loads(p.read_text())
        print(p, json.dumps({k: m.get(k) for k in ("stage", "arm", "examples", "distilled", "control", "steps", "train_loss", "seconds")}))
PY
log "done after $(( $(date +%s) - t0 )) s"
