#!/usr/bin/env bash
# Device calls on a pair of H200s with vllm installed (issue 16). Run from a copy of the repo (the
# workflow's results/ and vLLM's compile cache stay on the machine between calls of one lease):
#   bash bench/h200x2_session.sh PART...
# Parts, each within one 10-minute call; each writes its log and JSON under $OUT:
#   install WHEELS  the vLLM wheelhouse (WHEELS/.whl-vllm: chunk folders, MANIFEST.tsv, install.sh)
#                   and the workflow's own packages (WHEELS/.whl, WHEELS/.whl2: snakemake, jsonschema, ...)
#   tp        SmolLM2 prepared by the workflow, and its TP 1 reference (completions, bpb), which also
#             warms vLLM's compile cache for the workflow's stages. SmolLM2 has 9 attention heads, so
#             vLLM refuses it at TP 2: the TP 2 checks run on the models of q7w and tiny
#   q7w       a random 7B-shaped Qwen2 (2 layers, padded vocab): TP 1 reference, then at TP 2 weights
#             bit for bit (3 seeds), restore, teacher-forced agreement with TP 1, bpb (bench/vllm_tp.py)
#   tiny      the same at TP 1 and 2 on the tests' tiny untied Qwen2 (peaky logits: initializer 0.5)
#   bench7    the 7B-shaped seeds/s benchmark at TP 1, then TP 2 (bench/vllm_bench.py)
#   dp        data parallelism: evaluate_shard of bench/h200x2_dp.yaml on 1 GPU, then the whole
#             workflow with --resources gpu=2; evaluate_shard's wall-clock span in each
set -uo pipefail
export VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 VLLM_NO_USAGE_STATS=1 PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# Each stage claims its own GPUs (randopt/gpu_slots.py); a preset list would make them share.
unset CUDA_VISIBLE_DEVICES
OUT=${OUT:-/tmp/randopt-out}
mkdir -p "$OUT"
status=0
SMK="python3 -m snakemake --cores 32"

smollm2() { ls -d data/models/*/model 2>/dev/null | head -1; }

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
      { $SMK results/record.json --configfile bench/h200x2_dp.yaml --until prepare_model
        model=$(smollm2)
        timeout 300 python3 bench/vllm_tp.py reference --model "$model" --out "$OUT/h200x2_tp1_smollm2.json" \
          || echo "PART FAILED: reference"
      } 2>&1 | tee "$OUT/tp.log" ;;
    q7w)
      { timeout 120 python3 bench/vllm_tp.py build-7b --dir /tmp/q7b-2layer --out "$OUT/h200x2_q7b2_build.json"
        # SmolLM2 has 9 attention heads, so it cannot run at TP 2: the TP 1 / TP 2 comparison runs here.
        # gpu_memory_utilization 0.6: this process computes the reference on GPU 0 beside the engine
        RANDOPT_TP_GPU_UTIL=0.6 timeout 200 python3 bench/vllm_tp.py reference --model /tmp/q7b-2layer \
          --out "$OUT/h200x2_tp1_qwen7b_2layer.json" || echo "PART FAILED: q7 reference"
        RANDOPT_TP_GPU_UTIL=0.6 timeout 330 python3 bench/vllm_tp.py check --tp 2 --model /tmp/q7b-2layer \
          --reference "$OUT/h200x2_tp1_qwen7b_2layer.json" --out "$OUT/h200x2_tp2_qwen7b_2layer.json" \
          || echo "PART FAILED: q7 check"
      } 2>&1 | tee "$OUT/q7w.log" ;;
    bench7)
      { model=$(smollm2)
        timeout 280 python3 bench/vllm_bench.py --tp 1 --keep-model --out "$OUT" ${model:+--tokenizer "$model"} \
          || echo "PART FAILED: bench tp1"
        timeout 280 python3 bench/vllm_bench.py --tp 2 --out "$OUT" ${model:+--tokenizer "$model"} \
          || echo "PART FAILED: bench tp2"
      } 2>&1 | tee "$OUT/bench7.log" ;;
    dp)
      # Same population, same (warm) compile cache: 4 shards on one GPU, then on two (the target
      # before --resources: placed after it, argparse would take the target as a resource).
      { rm -rf results/shards results/rank results/members results/bpb results/vote results/record.json
        $SMK results/record.json --resources gpu=1 --configfile bench/h200x2_dp.yaml --until evaluate_shard \
          || echo "PART FAILED: dp gpu=1"
        mkdir -p /tmp/dp1 && cp -r results/shards /tmp/dp1/ && cp -r logs/evaluate_shard /tmp/dp1/logs
        tar -czf "$OUT/dp1-logs.tgz" -C /tmp/dp1 .
        rm -rf results/shards
        $SMK results/record.json --resources gpu=2 --configfile bench/h200x2_dp.yaml || echo "PART FAILED: dp gpu=2"
        tar_logs dp2
        python3 - "$OUT/h200x2_dp.json" <<'PY'
import glob, json, re, sys
from randopt.record import job_intervals, wall_clock_span
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
    tiny)
      { python3 -c "from tests.support.tiny_model import build_tiny_qwen2; build_tiny_qwen2('/tmp/tiny-untied', tie=False)"
        RANDOPT_TP_GPU_UTIL=0.3 timeout 150 python3 bench/vllm_tp.py reference --model /tmp/tiny-untied \
          --out "$OUT/h200x2_tp1_tiny.json" || echo "PART FAILED: tiny reference"
        RANDOPT_TP_GPU_UTIL=0.3 timeout 250 python3 bench/vllm_tp.py check --tp 2 --model /tmp/tiny-untied \
          --reference "$OUT/h200x2_tp1_tiny.json" --out "$OUT/h200x2_tp2_tiny.json" || echo "PART FAILED: tiny check"
      } > "$OUT/tiny.log" 2>&1 ;;
    *) echo "unknown part $part (install, tp, q7w, tiny, bench7, dp)"; exit 2 ;;
  esac
  echo "== $part: $(( $(date +%s) - start )) s" | tee -a "$OUT/parts.txt"
done
exit $status
