#!/usr/bin/env bash
# One device call on an H200 with vllm installed (docs/gpu.md says how it gets there): the vLLM
# engine's contract suite, the whole workflow with engine: vllm on the default protocol, the
# 7B-shaped seeds/s benchmark, and where a stage's engine start goes (after workflow: it uses the
# prepared model). Each part writes its log (and outputs) under $OUT.
#   bash bench/vllm/h200_session.sh [contract] [workflow] [bench] [startup]    (no argument: all four)
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../device_env.sh"
OUT=${OUT:-/tmp/randopt-out}
mkdir -p "$OUT"
parts=${*:-contract workflow bench startup}
status=0

for part in $parts; do
  start=$(date +%s)
  case $part in
    contract)
      python3 -m pytest -v -p no:cacheprovider tests/test_engine_vllm.py tests/test_vllm_layouts.py 2>&1 \
        | tee "$OUT/contract.log" || status=1 ;;
    workflow)
      python3 -m snakemake --cores 16 results/record.json --configfile config/default_vllm.yaml 2>&1 \
        | tee "$OUT/workflow.log" || status=1
      cp -r results/record.json logs "$OUT/" 2>/dev/null
      cp RECORDS.md "$OUT/" 2>/dev/null ;;
    bench)
      tokenizer=$(ls -d data/models/*/model 2>/dev/null | head -1)
      python3 bench/vllm/vllm_bench.py --out "$OUT" ${tokenizer:+--tokenizer "$tokenizer"} 2>&1 \
        | tee "$OUT/bench.log" || status=1 ;;
    startup)
      model=$(ls -d data/models/*/model 2>/dev/null | head -1)
      python3 bench/vllm/vllm_startup.py --out "$OUT" --model "${model:?run the workflow part first}" 2>&1 \
        | tee "$OUT/startup.log" || status=1 ;;
    *) echo "unknown part $part (contract, workflow, bench, startup)"; exit 2 ;;
  esac
  echo "== $part: $(( $(date +%s) - start )) s" | tee -a "$OUT/parts.txt"
done
exit $status
