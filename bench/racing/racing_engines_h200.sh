#!/usr/bin/env bash
# Racing with N engines per GPU against full evaluation with N, on one H200 in one call (issue 28 item 4):
#   bash bench/racing/racing_engines_h200.sh [N]        (default N 2)
# bench/racing/racing.py on bench/racing/racing_engines_h200.yaml (SmolLM2, 192 members, 128 train problems),
# both arms with engine.engines_per_gpu N (its --set) under --resources gpu=1: setup, a warm-up, the full
# arm, the racing arm and the report, under a timeout of $RACE_BUDGET_S (480). Back in $OUT:
# racing_engines_h200_n<N>.json (ratios_racing_over_full.seeds_per_s is the answer) and the logs' archive.
# RACE_SET (JSON) varies both arms' protocol beyond the engines (racing.py --set), RACE_TAG names the files:
#   RACE_TAG=spec RACE_SET='{"engine": {"engines_per_gpu": 2, "speculation": "population"}, "population": {"n_seeds": 8}}'
# is issue 31's check that speculation composes with engines side by side, racing and full evaluation.
# Needs vLLM (../shared/tools/vllm-wheelhouse) and snakemake + jsonschema in /tmp/site: run it after
# bench/peers/peers_h200.sh smollm2 in the same lease (its install), or carry .peers/wheels/p2 after
# `peers_h200.sh stash` of p1, as that script does.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../device_env.sh"
unset CUDA_VISIBLE_DEVICES
N=${1:-2}
OUT=${OUT:-/tmp/racing-engines-out}
TAG=${RACE_TAG:-n$N}
SET=${RACE_SET:-"{\"engine\": {\"engines_per_gpu\": $N}}"}
WORKDIR=${RACE_WORKDIR:-/tmp/racing-engines-$TAG}
export SITE=${SITE:-/tmp/site}
export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
mkdir -p "$OUT"
[ -d .peers/wheels/p2 ] && bash bench/peers/install_wheels.sh stash .peers/wheels/p2 > /dev/null
bash bench/peers/install_wheels.sh install || { echo "INSTALL FAILED: snakemake is needed (see the header)"; exit 1; }
rm -rf "$WORKDIR"   # racing.py refuses a used workdir: a rerun starts over
timeout "${RACE_BUDGET_S:-480}" python3 bench/racing/racing.py --configfile bench/racing/racing_engines_h200.yaml \
  --workdir "$WORKDIR" --out "$OUT/racing_engines_h200_$TAG.json" --cores 16 --resources gpu=1 \
  --set "$SET" 2>&1 | tee "$OUT/racing_engines_$TAG.log"
status=${PIPESTATUS[0]}
[ "$status" -eq 0 ] || echo "RACING BENCH FAILED or cut off (exit $status); each finished arm's record is in the archive"
tar -czf "$OUT/racing_engines_$TAG-logs.tgz" -C "$WORKDIR" $(cd "$WORKDIR" 2>/dev/null && ls -d */logs */bench_*.log \
  */results/record.json */.snakemake/engines/*.log bench_state.json 2>/dev/null) 2>/dev/null
exit "$status"
