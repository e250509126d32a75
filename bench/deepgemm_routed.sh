#!/usr/bin/env bash
# DeepGEMM's contiguous GEMM on routed per-expert sizes (bench/deepgemm_routed.py), e.g.
#   bash bench/deepgemm_routed.sh 8192x256x8x512x2048   # tokens x experts x top-k x N x K
# Uses the DeepGEMM that .baselines/deepgemm/run.sh unpacked to /tmp/deepgemm, or unpacks it there
# itself (its kernels are then compiled on first use, outside the timing).
W=/tmp/deepgemm
if [ ! -d $W/DeepGEMM ]; then
  [ -f .baselines/deepgemm/deepgemm.tar.gz ] || { echo "no .baselines/deepgemm: copy ../shared/baselines/deepgemm there and carry it"; exit 1; }
  rm -rf $W && mkdir -p $W && tar xzf .baselines/deepgemm/deepgemm.tar.gz -C $W
fi
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
export PYTHONUNBUFFERED=1 DG_JIT_CACHE_DIR=/root/dgcache PYTHONPATH=$W/DeepGEMM${PYTHONPATH:+:$PYTHONPATH}
export LD_LIBRARY_PATH=$(dirname "$(dirname "$NVCC")")/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
timeout 240 python3 bench/deepgemm_routed.py $(pwd)/.baselines/deepgemm "$@"
