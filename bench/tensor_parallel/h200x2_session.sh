#!/usr/bin/env bash
# Device calls on a pair of H200s with vllm installed (issue 16). Run from a copy of the repo (the
# workflow's results/ and vLLM's compile cache stay on the machine between calls of one lease):
#   bash bench/tensor_parallel/h200x2_session.sh PART...
# Parts, each within one 10-minute call; each writes its log and JSON under $OUT:
#   install WHEELS  the vLLM wheelhouse (WHEELS/.whl-vllm: chunk folders, MANIFEST.tsv, install.sh)
#                   and the workflow's own packages (WHEELS/.whl, WHEELS/.whl2: snakemake, jsonschema, ...)
#   tp        SmolLM2 prepared by the workflow, and its TP 1 reference (completions, bpb), which also
#             warms vLLM's compile cache for the workflow's stages. SmolLM2 has 9 attention heads, so
#             vLLM refuses it at TP 2: the TP 2 checks run on the models of q7w and tiny
#   q7w       a random 7B-shaped Qwen2 (2 layers, padded vocab): TP 1 reference, then at TP 2 weights
#             bit for bit (3 seeds), restore, teacher-forced agreement with TP 1, bpb (bench/tensor_parallel/vllm_tp.py)
#   tiny      the same at TP 1 and 2 on the tests' tiny untied Qwen2 (peaky logits: initializer 0.5)
#   bench7    the 7B-shaped seeds/s benchmark at TP 1, then TP 2 (bench/vllm/vllm_bench.py)
#   dp        data parallelism: evaluate_shard of bench/tensor_parallel/h200x2_dp.yaml on 1 GPU, then the whole
#             workflow with --resources gpu=2; evaluate_shard's wall-clock span in each
#   pad       SmolLM2 padded to 12 heads / 4 kv heads (bench/tensor_parallel/pad_heads.py: transformers logits and greedy
#             text against SmolLM2), prepared as bench/tensor_parallel/h200x2_tp2.yaml's model; its TP 1 reference, then at
#             TP 2 weights bit for bit (3 seeds), restore, teacher-forced agreement with TP 1, bpb; last,
#             if time is left, SmolLM2's TP 1 reference against the padded model's (the same function)
#   tp1wf     the whole workflow on the padded model, bench/tensor_parallel/h200x2_tp2.yaml at TP 1 (two engines at once)
#   tp2wf     the same at TP 2 (one engine of 2 GPUs at a time), then bench/tensor_parallel/compare_records.py: TP 2's
#             accuracies and bpb against TP 1's. Run tp1wf first, in the same lease (its record is kept
#             in $KEEP). Both build the padded model first if the lease is fresh. A part cut off at the
#             call's limit can be run again: the workflow resumes (finished stages are kept).
#   race-prepare, race-full, race-racing, race-report
#             issue 17's racing benchmark (bench/racing/racing.py, bench/racing/racing_h200.yaml) with --resources gpu=2, one
#             phase per call in /tmp/racing-h200; each arm's record comes back (the full arm's is issue 14's
#             larger protocol), the report after race-report
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../device_env.sh"
# Each stage claims its own GPUs (randopt/runtime/gpu_slots.py); a preset list would make them share.
unset CUDA_VISIBLE_DEVICES
OUT=${OUT:-/tmp/randopt-out}
KEEP=${KEEP:-/tmp/randopt-keep}   # what a later call of the same lease needs ($OUT is emptied per call)
PADDED=data/padded/smollm2-h12-kv4  # bench/tensor_parallel/h200x2_tp2.yaml's model.path
mkdir -p "$OUT" "$KEEP"
status=0
SMK="python3 -m snakemake --cores 32"
RACE_TAG=${RACE_TAG:-racing_h200x2}   # the racing parts' output names (bench/results/<tag>.json, <tag>_<arm>_record.json)
RACE_GPUS=${RACE_GPUS:-2}             # --resources gpu=N of the racing parts (1 on a single H200)
# RACE_KNOBS: racing's knobs over the overlay's, a JSON object (bench/racing/racing.py --racing), e.g. {"first_slice": 32, "growth": 4.0}
# RACE_SET: a variant of the overlay for both arms, a JSON object (bench/racing/racing.py --set), e.g. {"task": {"gsm8k": {"n_train": 512}}}

# A prepared model dir, by its manifest: SmolLM2 from the wheel, or the padded model (source local).
prepared() {
  python3 - "$1" "$PADDED" <<'PY'
import glob, json, os, sys
for m in sorted(glob.glob("data/models/*/manifest.json"), key=os.path.getmtime, reverse=True):
    man = json.load(open(m))
    if man.get("source") == sys.argv[1] and (sys.argv[1] != "local" or
                                             os.path.realpath(man["source_path"]) == os.path.realpath(sys.argv[2])):
        print(os.path.join(os.path.dirname(m), "model"))
        break
PY
}
smollm2() { prepared gguf_wheel; }
padded() { prepared local; }

# SmolLM2 prepared by the workflow, padded to $PADDED (kept when it is there already; verified with
# transformers when $1 is a JSON path), and prepared as bench/tensor_parallel/h200x2_tp2.yaml's model: the workflow
# links it, and the engine runs (and vLLM compiles) it under that path, data/models/<key>/model.
build_padded() {
  [ -n "$(smollm2)" ] || $SMK results/record.json --configfile bench/tensor_parallel/h200x2_dp.yaml --until prepare_model
  timeout 120 python3 bench/tensor_parallel/pad_heads.py --src "$(smollm2)" --dst "$PADDED" --heads 12 --kv-heads 4 --reuse \
    ${1:+--verify --out "$1"} || echo "PART FAILED: pad"
  [ -n "$(padded)" ] || $SMK results/record.json --configfile bench/tensor_parallel/h200x2_tp2.yaml --until prepare_model
}

tar_logs() {  # $OUT keeps at most 8 files a call: stage logs go back as one archive
  tar -czf "$OUT/$1-logs.tgz" logs results/shards/*/*/*.timings.json results/record.json RECORDS.md 2>/dev/null
}

while [ $# -gt 0 ]; do
  part=$1; shift
  start=$(date +%s)
  case $part in
    install)
      w=${1:?install needs the folder holding .whl-vllm, .whl and .whl2}; shift
      # Chunk folders were carried (and copied to /tmp/vw) one call each; the last brings the rest.
      mkdir -p /tmp/vw && cp -r "$w"/.whl-vllm/c0* /tmp/vw/ 2>/dev/null
      cp "$w"/.whl-vllm/MANIFEST.tsv "$w"/.whl-vllm/install.sh /tmp/vw/
      bash /tmp/vw/install.sh /tmp/vw > "$OUT/install.log" 2>&1 || { status=1; tail -20 "$OUT/install.log"; }
      python3 -m pip install -q --no-index --no-deps --no-compile "$w"/.whl/*.whl \
        $(ls "$w"/.whl2/*.whl /tmp/vw/extra/*.whl 2>/dev/null | head -1) 2>&1 | tee -a "$OUT/install.log"
      python3 -c "import vllm, snakemake, jsonschema, torch; print('vllm', vllm.__version__, 'snakemake', snakemake.__version__, 'gpus', torch.cuda.device_count())" \
        2>&1 | tee -a "$OUT/install.log" || status=1
      nvidia-smi topo -m 2>&1 | tee -a "$OUT/install.log" ;;
    tp)
      { $SMK results/record.json --configfile bench/tensor_parallel/h200x2_dp.yaml --until prepare_model
        model=$(smollm2)
        timeout 300 python3 bench/tensor_parallel/vllm_tp.py reference --model "$model" --out "$OUT/tensor_parallel_h200x2_tp1_smollm2.json" \
          || echo "PART FAILED: reference"
      } 2>&1 | tee "$OUT/tp.log" ;;
    q7w)
      { timeout 120 python3 bench/tensor_parallel/vllm_tp.py build-7b --dir /tmp/q7b-2layer --out "$OUT/tensor_parallel_h200x2_q7b2_build.json"
        # SmolLM2 has 9 attention heads, so it cannot run at TP 2: the TP 1 / TP 2 comparison runs here.
        # gpu_memory_utilization 0.6: this process computes the reference on GPU 0 beside the engine
        RANDOPT_TP_GPU_UTIL=0.6 timeout 200 python3 bench/tensor_parallel/vllm_tp.py reference --model /tmp/q7b-2layer \
          --out "$OUT/tensor_parallel_h200x2_tp1_qwen7b_2layer.json" || echo "PART FAILED: q7 reference"
        RANDOPT_TP_GPU_UTIL=0.6 timeout 330 python3 bench/tensor_parallel/vllm_tp.py check --tp 2 --model /tmp/q7b-2layer \
          --reference "$OUT/tensor_parallel_h200x2_tp1_qwen7b_2layer.json" --out "$OUT/tensor_parallel_h200x2_tp2_qwen7b_2layer.json" \
          || echo "PART FAILED: q7 check"
      } 2>&1 | tee "$OUT/q7w.log" ;;
    bench7)
      { model=$(smollm2)
        timeout 280 python3 bench/vllm/vllm_bench.py --tp 1 --keep-model --out "$OUT" ${model:+--tokenizer "$model"} \
          || echo "PART FAILED: bench tp1"
        timeout 280 python3 bench/vllm/vllm_bench.py --tp 2 --out "$OUT" ${model:+--tokenizer "$model"} \
          || echo "PART FAILED: bench tp2"
      } 2>&1 | tee "$OUT/bench7.log" ;;
    dp)
      # Same population, same (warm) compile cache: 4 shards on one GPU, then on two (the target
      # before --resources: placed after it, argparse would take the target as a resource).
      { rm -rf results/shards results/rank results/members results/bpb results/vote results/record.json
        $SMK results/record.json --resources gpu=1 --configfile bench/tensor_parallel/h200x2_dp.yaml --until evaluate_shard \
          || echo "PART FAILED: dp gpu=1"
        mkdir -p /tmp/dp1 && cp -r results/shards /tmp/dp1/ && cp -r logs/evaluate_shard /tmp/dp1/logs
        tar -czf "$OUT/dp1-logs.tgz" -C /tmp/dp1 .
        rm -rf results/shards
        $SMK results/record.json --resources gpu=2 --configfile bench/tensor_parallel/h200x2_dp.yaml || echo "PART FAILED: dp gpu=2"
        tar_logs dp2
        python3 - "$OUT/tensor_parallel_h200x2_dp.json" <<'PY'
import glob, json, re, sys
from randopt.records.assemble import job_intervals, wall_clock_span
def stage(root, logs):
    timings = [json.load(open(p)) for p in sorted(glob.glob(f"{root}/*/*/*.timings.json"))]
    gpus = {}
    for p in sorted(glob.glob(f"{logs}/*/*/*.log")):
        m = re.search(r"GPU slot: GPUs \[([0-9, ]+)\]", open(p).read())
        gpus[p.split("evaluate_shard/")[-1]] = m.group(1) if m else None
    seeds = sum(t["seeds"][1] - t["seeds"][0] + 1 for t in timings)
    span = wall_clock_span(job_intervals(timings))
    return {"shards": len(timings), "seeds": seeds, "wall_clock_span_s": span, "seeds_per_s": seeds / span,
            "sum_of_job_s": sum(t["seconds"] for t in timings),
            "per_shard": [{"seeds": t["seeds"], "sigma": t["sigma"], "seconds": t["seconds"], "load_s": t["load_s"],
                           "loop_s": t["switch_s"] + t["generate_s"], "started_at": t["started_at"],
                           "ended_at": t["ended_at"]} for t in timings], "gpu_of_each_log": gpus}
one, two = stage("/tmp/dp1/shards", "/tmp/dp1/logs"), stage("results/shards", "logs/evaluate_shard")
rec = json.load(open("results/record.json"))
out = {"one_gpu": one, "two_gpus": two, "speedup_seeds_per_s": two["seeds_per_s"] / one["seeds_per_s"],
       "record_throughput": rec["throughput"], "record_timings_s": rec["timings_s"], "record_accuracy": rec["accuracy"],
       "record_bpb_base": rec["bpb"]["base"], "record_bpb_ensemble": rec["bpb"]["ensemble"]}
json.dump(out, open(sys.argv[1], "w"), indent=1)
print(json.dumps({k: v for k, v in out.items() if k not in ("one_gpu", "two_gpus")} | {
    "one_gpu_span": one["wall_clock_span_s"], "two_gpu_span": two["wall_clock_span_s"],
    "gpus_one": one["gpu_of_each_log"], "gpus_two": two["gpu_of_each_log"]}, indent=1))
PY
      } 2>&1 | tee "$OUT/dp.log" ;;
    pad)
      { build_padded "$OUT/tensor_parallel_h200x2_pad.json"
        model=$(padded)
        echo "padded model: $model -> $(readlink -f "$model")"
        timeout 170 python3 bench/tensor_parallel/vllm_tp.py reference --model "$model" --out "$OUT/tensor_parallel_h200x2_tp1_padded.json" \
          || echo "PART FAILED: padded reference"
        timeout 270 python3 bench/tensor_parallel/vllm_tp.py check --tp 2 --model "$model" --reference "$OUT/tensor_parallel_h200x2_tp1_padded.json" \
          --out "$OUT/tensor_parallel_h200x2_tp2_padded.json" || echo "PART FAILED: padded check"
        # SmolLM2 itself at TP 1, fed the padded model's completions: an extra engine start, so only
        # when it fits in the call (600 s).
        left=$(( 575 - ($(date +%s) - start) ))
        if [ "$left" -gt 100 ] && [ -f "$OUT/tensor_parallel_h200x2_tp1_padded.json" ]; then
          timeout "$left" python3 bench/tensor_parallel/vllm_tp.py reference --model "$(smollm2)" \
            --against "$OUT/tensor_parallel_h200x2_tp1_padded.json" --out "$OUT/tensor_parallel_h200x2_tp1_smollm2_vs_padded.json" \
            || echo "PART FAILED: smollm2 against padded"
        else
          echo "skipped SmolLM2 against the padded model: ${left} s left"
        fi
      } 2>&1 | tee "$OUT/pad.log" ;;
    tp1wf|tp2wf)
      # The same config but tensor_parallel_size (an overlay on bench/tensor_parallel/h200x2_tp2.yaml): TP 1 runs two
      # engines at once (one per GPU), TP 2 one engine of both GPUs at a time.
      tp=${part:2:1}
      { build_padded
        printf 'run_name: h200x2-tp%s-smollm2-padded-vllm\nengine:\n  tensor_parallel_size: %s\n' "$tp" "$tp" \
          > "$KEEP/tp$tp.yaml"
        cfg="--configfile bench/tensor_parallel/h200x2_tp2.yaml $KEEP/tp$tp.yaml"
        $SMK results/record.json $cfg --unlock > /dev/null 2>&1  # a lock left by a call cut off at its limit
        $SMK results/record.json --resources gpu=2 $cfg || echo "PART FAILED: workflow tp $tp"
        tar_logs "$part"
        # Only a record of this run: same model, this TP (a failed run leaves the previous record).
        if [ -f results/record.json ] && python3 -c "import json, sys; r = json.load(open('results/record.json'))
sys.exit(not (r['engine']['tensor_parallel_size'] == $tp and r['model']['source'] == 'local'))"; then
          cp results/record.json "$OUT/tensor_parallel_h200x2_tp${tp}_padded_record.json"
          cp results/record.json "$KEEP/tensor_parallel_h200x2_tp${tp}_padded_record.json"
        else
          echo "PART FAILED: results/record.json is not this run's record"
        fi
        if [ "$tp" = 2 ]; then
          python3 bench/tensor_parallel/compare_records.py "$KEEP/tensor_parallel_h200x2_tp1_padded_record.json" \
            "$KEEP/tensor_parallel_h200x2_tp2_padded_record.json" --out "$OUT/tensor_parallel_h200x2_tp2_vs_tp1_padded.json" \
            || echo "PART FAILED: compare (run tp1wf first, in the same lease)"
        fi
      } 2>&1 | tee "$OUT/$part.log" ;;
    race-prepare|race-full|race-racing|race-report)
      # Issue 17's benchmark (bench/racing/racing.py on bench/racing/racing_h200.yaml: 768 members, 128 train and 256
      # test problems) with RACE_GPUS engines at once, one phase per call in one work dir; the full arm's
      # record is issue 14's larger protocol (frac_at_or_above_base per sigma, the gain's interval).
      phase=${part#race-}
      { timeout 580 python3 bench/racing/racing.py --configfile bench/racing/racing_h200.yaml --workdir /tmp/racing-h200 \
          --out "$OUT/${RACE_TAG}.json" --cores "$(nproc)" --resources gpu="$RACE_GPUS" --phases "$phase" ${RACE_KNOBS:+--racing "$RACE_KNOBS"} \
          ${RACE_SET:+--set "$RACE_SET"} \
          || echo "PART FAILED: racing $phase"
        arm=/tmp/racing-h200/$phase
        if [ -f "$arm/results/record.json" ]; then
          cp "$arm/results/record.json" "$OUT/${RACE_TAG}_${phase}_record.json"
          tar -czf "$OUT/race-$phase-logs.tgz" -C "$arm" logs 2>/dev/null \
            $(cd "$arm" && ls -d results/rank results/race bench_*.log 2>/dev/null)
        fi
      } 2>&1 | tee "$OUT/$part.log" ;;
    tiny)
      { python3 -c "from tests.support.tiny_model import build_tiny_qwen2; build_tiny_qwen2('/tmp/tiny-untied', tie=False)"
        RANDOPT_TP_GPU_UTIL=0.3 timeout 150 python3 bench/tensor_parallel/vllm_tp.py reference --model /tmp/tiny-untied \
          --out "$OUT/tensor_parallel_h200x2_tp1_tiny.json" || echo "PART FAILED: tiny reference"
        RANDOPT_TP_GPU_UTIL=0.3 timeout 250 python3 bench/tensor_parallel/vllm_tp.py check --tp 2 --model /tmp/tiny-untied \
          --reference "$OUT/tensor_parallel_h200x2_tp1_tiny.json" --out "$OUT/tensor_parallel_h200x2_tp2_tiny.json" || echo "PART FAILED: tiny check"
      } > "$OUT/tiny.log" 2>&1 ;;
    *) echo "unknown part $part (install, tp, q7w, tiny, bench7, dp, pad, tp1wf, tp2wf, race-prepare, race-full, race-racing, race-report)"; exit 2 ;;
  esac
  echo "== $part: $(( $(date +%s) - start )) s" | tee -a "$OUT/parts.txt"
done
exit $status
