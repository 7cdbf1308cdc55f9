# The environment every device script runs under, sourced from each (one place to change it): vLLM's
# FlashInfer sampler off (flashinfer is not in the wheelhouse: ../shared/tools/vllm-wheelhouse/README.md), the
# Hub offline, no usage stats, unbuffered logs; and NVLink multicast off in NCCL, PyTorch and NVSHMEM, as the
# device's KINDS.md requires (a program using it can put the host's shared GPUs out of service).
export VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 VLLM_NO_USAGE_STATS=1 PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

# A device call's time (each script sets T0 at its start and BUDGET, the seconds of the call it may use): left is
# what remains less RESERVE (20 s unless the script sets it) for the call's own end; part_seconds KEEP is the
# timeout for a part that needs KEEP more seconds after a cut (Snakemake's stop, the packing of what the part
# made), and fails under 31 s, since `timeout 0` would mean no limit at all.
left() { echo $(( BUDGET - ${RESERVE:-20} - ($(date +%s) - T0) )); }
part_seconds() { local t=$(( $(left) - ${1:-0} )); echo "$t"; [ "$t" -gt 30 ]; }
