#!/usr/bin/env bash
# DeepGEMM's contiguous GEMM on routed per-expert sizes (bench/deepgemm_routed.py), e.g.
#   bash bench/deepgemm_routed.sh 8192x256x8x512x2048   # tokens x experts x top-k x N x K
# After .baselines/deepgemm/run.sh (which unpacks DeepGEMM to /tmp/deepgemm and JIT-warms it).
W=/tmp/deepgemm
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
export PYTHONUNBUFFERED=1 DG_JIT_CACHE_DIR=/root/dgcache PYTHONPATH=$W/DeepGEMM${PYTHONPATH:+:$PYTHONPATH}
export LD_LIBRARY_PATH=$(dirname "$(dirname "$NVCC")")/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
timeout 240 python3 bench/deepgemm_routed.py $(pwd)/.baselines/deepgemm "$@"
