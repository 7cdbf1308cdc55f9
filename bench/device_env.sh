# The environment every device script runs under, sourced from each (one place to change it): vLLM's
# FlashInfer sampler off (flashinfer is not in the wheelhouse: ../shared/tools/vllm-wheelhouse/README.md), the
# Hub offline, no usage stats, unbuffered logs; and NVLink multicast off in NCCL, PyTorch and NVSHMEM, as the
# device's KINDS.md requires (a program using it can put the host's shared GPUs out of service).
export VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 VLLM_NO_USAGE_STATS=1 PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
