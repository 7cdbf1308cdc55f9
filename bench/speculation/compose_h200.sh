#!/usr/bin/env bash
# Issue 31's composition check on one H200, in one device call: the real workflow (Snakemake) with
# engine.speculation population, two engines side by side (engine.engines_per_gpu 2) and racing
# (selection.mode racing), on bench/racing/racing_engines_h200.yaml cut to 8 seeds x 3 sigmas.
#   bash bench/speculation/compose_h200.sh           (repo root; COMPOSE_BUDGET_S=280 for the workflow)
# Needs vLLM (../shared/tools/vllm-wheelhouse) and snakemake + jsonschema in /tmp/site (as
# bench/racing/racing_engines_h200.sh installs them). $OUT gets compose.log, compose_record.json and the logs.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../device_env.sh"
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
unset CUDA_VISIBLE_DEVICES
OUT=${OUT:-/tmp/compose-out}; mkdir -p "$OUT"
REPO=$PWD
RUN=${COMPOSE_WORKDIR:-/tmp/compose-spec}
rm -rf "$RUN"; mkdir -p "$RUN"
cat > "$RUN/overlay.yaml" <<'YAML'
run_name: compose-speculation-engines-racing
engine: {engines_per_gpu: 2, speculation: population}
population: {n_seeds: 8}
selection: {mode: racing}
YAML
t0=$(date +%s)
timeout -k 15 "${COMPOSE_BUDGET_S:-280}" python3 -m snakemake --snakefile "$REPO/Snakefile" --directory "$RUN" \
  --configfile "$REPO/bench/racing/racing_engines_h200.yaml" "$RUN/overlay.yaml" --cores 16 --resources gpu=1 \
  --scheduler greedy > "$OUT/compose.log" 2>&1
rc=$?
echo "compose: snakemake rc=$rc after $(( $(date +%s) - t0 )) s (124: cut by the budget)"
python3 -m randopt.runtime.resident.server stop "$RUN/.snakemake/engines" > /dev/null 2>&1 || true
grep -E "^(Finished|Error|localrule|rule )|Exception|Error" "$OUT/compose.log" | tail -30
cp "$RUN/results/record.json" "$OUT/compose_record.json" 2>/dev/null || echo "no record (the run did not finish)"
tar -czf "$OUT/compose-logs.tgz" -C "$RUN" $(cd "$RUN" && ls -d logs results/benchmarks .snakemake/engines/*.log 2>/dev/null) 2>/dev/null
exit "$rc"
