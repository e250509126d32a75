// Stages 1-3 in one block, for small batches: route -> layout -> quantize + gather. At a few
// tokens each stage is a few hundred nanoseconds of work behind a launch; one launch instead of
// three removes two launch gaps from the critical path (docs/perf.md, W6 v2). The block runs the
// same device functions as the three separate kernels, separated by block barriers (which also
// make each step's global writes visible to the next).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "hopper/grid_dependency.cuh"
#include "moe/gather.cuh"
#include "moe/layout.cuh"
#include "moe/route.cuh"
#include "moe/workspace.h"

namespace lowbit::moe {

constexpr int kPrepareThreads = kLayoutThreads;
constexpr int kPrepareMaxPairs = kPrepareThreads;  // one claimed row per pair in shared memory

// Routes from `logits` into `ids_out` / `weights_out` (which p.ids / p.weights point at) unless
// logits is null (the caller routed).
template <class LogitT, int kPerLane>
__global__ void __launch_bounds__(kPrepareThreads, 1)
    prepare_kernel(const LogitT* __restrict__ logits, float softcap, bool renormalize, int32_t* ids_out,
                   float* weights_out, const __nv_bfloat16* __restrict__ x, MoeParams p) {
  static_assert(kPrepareThreads == kLayoutThreads, "the layout step needs one thread per expert");
  __shared__ int s_rows[kPrepareMaxPairs];
  constexpr int kWarps = kPrepareThreads / 32;
  const int tid = threadIdx.x, warp = tid / 32;
  hopper::launch_dependents();
  hopper::grid_dependency_wait();

  if (logits)
#pragma unroll 1
    for (int t = warp; t < p.m; t += kWarps)
      route_token<LogitT, kPerLane>(logits + static_cast<int64_t>(t) * p.experts, p.experts, p.top_k, softcap,
                                    renormalize, ids_out + static_cast<int64_t>(t) * p.top_k,
                                    weights_out + static_cast<int64_t>(t) * p.top_k);
  __syncthreads();

  layout_block(p);
  __syncthreads();

  const int pairs = p.m * p.top_k;  // <= kPrepareMaxPairs, checked by the launcher
  for (int i = tid; i < pairs; i += kPrepareThreads) s_rows[i] = claim_row(p, i);
  zero_output_rows(p, 0, p.m, tid, kPrepareThreads);
  __syncthreads();
  const int chunks = (p.k + kChunk - 1) / kChunk;
  for (int item = warp; item < p.m * chunks; item += kWarps) {
    const int t = item / chunks;
    quantize_chunk(x + static_cast<int64_t>(t) * p.k, (item % chunks) * kChunk, s_rows + t * p.top_k, p);
  }
}

}  // namespace lowbit::moe
