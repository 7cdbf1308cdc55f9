#!/usr/bin/env bash
# The workflow's own engine jobs with engines side by side on one H200 (engine.engines_per_gpu), against
# one engine, in one device call. The device has no Snakemake, so the jobs' commands come from a dry
# run here (`snakemake results/record.json -n -p --cores 16 --resources gpu=1 --configfile F`, the
# "Shell command:" lines of prepare_model, freeze_problems and evaluate_shard), and this script runs them
# as Snakemake would: the evaluate_shard jobs E at a time (the engine_slot resource). The one-engine
# arm writes under results_e1/ (its keys are the same: the engine count is in no key).
#   bash bench/engines_per_gpu/workflow_jobs_h200.sh CMDS_AUTO CMDS_ONE SLOTS
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../device_env.sh"
unset CUDA_VISIBLE_DEVICES
AUTO=${1:?commands of the engines_per_gpu auto arm}; ONE=${2:?commands of the one-engine arm}; SLOTS=${3:?E of the auto arm}
OUT=${OUT:-/tmp/randopt-out}; mkdir -p "$OUT"
here() { sed -e "s#PYTHONPATH=[^ ]* [^ ]*python3 -m#PYTHONPATH=$PWD:/tmp/site python3 -m#"; }
prepare_dirs() {  # the folders of each command's outputs and logs, as Snakemake makes them
  grep -oE "(--out|--timings|--manifest|--out-train|--out-dir|2>) [^ ]+" "$1" | awk '{print $2}' | xargs -n1 dirname | sort -u | xargs mkdir -p
}
now() { python3 -c 'import time; print(time.time())'; }
arm() {  # $1 commands, $2 jobs at a time, $3 tag
  local cmds=$1 jobs=$2 tag=$3 t0 smi=""
  here < "$cmds" > /tmp/cmds_$tag.sh
  prepare_dirs /tmp/cmds_$tag.sh
  # the data stages once (the arms share data/), each only if its manifest is missing
  grep -E "randopt\.stages\.(prepare_model|freeze_problems) " /tmp/cmds_$tag.sh | while read -r c; do
    m=$(echo "$c" | grep -oE -- "--manifest [^ ]+" | awk '{print $2}')
    [ -f "$m" ] || bash -c "$c" || echo "FAILED: $c" | tee -a "$OUT/summary.txt"
  done
  if command -v nvidia-smi > /dev/null; then
    nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader -lms 1000 > "$OUT/smi_$tag.csv" &
    smi=$!
  fi
  t0=$(now)
  grep -E "randopt\.stages\.evaluate_shard " /tmp/cmds_$tag.sh | tr '\n' '\0' | xargs -0 -P "$jobs" -I{} bash -c '{} || echo "JOB FAILED"'
  echo "$tag: $(python3 -c "print(round($(now) - $t0, 1))") s for the evaluate_shard jobs, $jobs at a time" | tee -a "$OUT/summary.txt"
  [ -n "$smi" ] && kill $smi
  python3 -m randopt.runtime.resident.server stop .snakemake/engines | tee -a "$OUT/summary.txt"
}
arm "$AUTO" "$SLOTS" auto
sed -e 's#results/shards/#results_e1/shards/#g' -e 's#logs/evaluate_shard/#logs_e1/evaluate_shard/#g' "$ONE" > /tmp/one.txt
arm /tmp/one.txt 1 one
python3 - "$OUT" <<'PY'
import glob, json, sys
import pandas as pd
out = sys.argv[1]
def arm(root):
    tables = {p.split("/")[-1]: pd.read_parquet(p) for p in sorted(glob.glob(f"{root}/shards/*/*/*.parquet"))}
    timings = [json.load(open(p)) for p in sorted(glob.glob(f"{root}/shards/*/*/*.timings.json"))]
    span = max(t["ended_at"] for t in timings) - min(t["started_at"] for t in timings)
    members = sum(len(t["members_evaluated"]) for t in timings)
    return tables, {"jobs": len(timings), "members": members, "span_s": span, "members_per_s": members / span,
                    "engine_starts": sum(t["engine_started"] and not t["engine_reused"] for t in timings),
                    "gen_tokens": sum(t["gen_tokens"] for t in timings)}
auto, a = arm("results"); one, b = arm("results_e1")
same = all(auto[k]["completion"].tolist() == one[k]["completion"].tolist() for k in one)
report = {"auto": a, "one": b, "ratio_members_per_s": a["members_per_s"] / b["members_per_s"],
          "completions_identical": same, "shards": sorted(one)}
json.dump(report, open(f"{out}/engines_per_gpu_h200_workflow_jobs.json", "w"), indent=2)
print(json.dumps(report, indent=2))
PY
tar -czf "$OUT/logs.tgz" logs logs_e1 .snakemake/engines/*.log results/shards/*/*/*.timings.json 2>/dev/null
