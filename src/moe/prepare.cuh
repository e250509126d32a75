// Stages 1-3 in one block, for small batches: route -> layout -> quantize + gather. At a few
// tokens each stage is a few hundred nanoseconds of work behind a launch and a chain of global
// round trips; here one launch does all three, the routing, the expert segments and the slot
// counters stay in shared memory, and the activations are loaded at the start so their latency
// hides under the routing (docs/perf.md, W6 v2). Same device functions, same results as the
// three separate kernels.
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
constexpr int kPrepareWarps = kPrepareThreads / 32;
constexpr int kPrepareMaxPairs = kPrepareThreads;  // routing pairs held in shared memory
constexpr int kPrepareChunksInFlight = 8;          // activation chunks each warp loads up front

// Routes from `logits` into `ids_out` / `weights_out` (where p.ids / p.weights point) unless
// logits is null (the caller routed).
template <class LogitT, int kPerLane>
__global__ void __launch_bounds__(kPrepareThreads, 1)
    prepare_kernel(const LogitT* __restrict__ logits, float softcap, bool renormalize, int32_t* ids_out,
                   float* weights_out, const __nv_bfloat16* __restrict__ x, MoeParams p) {
  static_assert(kPrepareThreads == kLayoutThreads, "the layout step needs one thread per expert");
  __shared__ int s_ids[kPrepareMaxPairs];
  __shared__ float s_weights[kPrepareMaxPairs];
  __shared__ int s_rows[kPrepareMaxPairs];
  __shared__ int s_row_start[kMaxExperts];
  __shared__ int s_cursor[kMaxExperts];
  const int tid = threadIdx.x, warp = tid / 32;
  const int pairs = p.m * p.top_k;  // <= kPrepareMaxPairs, checked by the launcher
  const int chunks = (p.k + kChunk - 1) / kChunk;
  const int items = p.m * chunks;  // (token, chunk) pairs, warp w takes w, w + 16, ...
  hopper::launch_dependents();
  hopper::grid_dependency_wait();

  uint4 ahead[kPrepareChunksInFlight];
#pragma unroll
  for (int j = 0; j < kPrepareChunksInFlight; ++j) {
    const int item = warp + j * kPrepareWarps;
    ahead[j] = item < items ? load_chunk(x + static_cast<int64_t>(item / chunks) * p.k, (item % chunks) * kChunk, p.k)
                            : make_uint4(0, 0, 0, 0);
  }

  // Route (or take the caller's routing) into shared memory.
  if (logits) {
#pragma unroll 1
    for (int t = warp; t < p.m; t += kPrepareWarps)
      route_token<LogitT, kPerLane>(logits + static_cast<int64_t>(t) * p.experts, p.experts, p.top_k, softcap,
                                    renormalize, s_ids + t * p.top_k, s_weights + t * p.top_k);
  } else {
    for (int i = tid; i < pairs; i += kPrepareThreads) {
      s_ids[i] = p.ids[i];
      s_weights[i] = p.weights[i];
    }
  }
  __syncthreads();

  // Layout; the segments stay in shared memory for the slot claims.
  const ExpertSegment seg = layout_block(p, [&](int i) { return s_ids[i]; });
  if (tid < p.experts) {
    s_row_start[tid] = seg.row_start;
    s_cursor[tid] = 0;
  }
  if (logits)
    for (int i = tid; i < pairs; i += kPrepareThreads) {
      ids_out[i] = s_ids[i];
      weights_out[i] = s_weights[i];
    }
  __syncthreads();

  // Claim each pair's sorted row, zero the output rows the GEMM adds into, then quantize.
  for (int i = tid; i < pairs; i += kPrepareThreads) {
    const int e = s_ids[i];
    int row = -1;
    if (static_cast<unsigned>(e) < static_cast<unsigned>(p.experts)) {
      row = s_row_start[e] + atomicAdd(&s_cursor[e], 1);
      p.row_pair[row] = i;
      p.row_weight[row] = s_weights[i];
    }
    s_rows[i] = row;
  }
  zero_output_rows(p, 0, p.m, tid, kPrepareThreads);
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kPrepareChunksInFlight; ++j) {
    const int item = warp + j * kPrepareWarps;
    if (item < items)
      quantize_chunk(ahead[j], (item % chunks) * kChunk, s_rows + item / chunks * p.top_k, p.top_k, p);
  }
  for (int item = warp + kPrepareChunksInFlight * kPrepareWarps; item < items; item += kPrepareWarps) {
    const int t = item / chunks;
    quantize_chunk(load_chunk(x + static_cast<int64_t>(t) * p.k, (item % chunks) * kChunk, p.k),
                   (item % chunks) * kChunk, s_rows + t * p.top_k, p.top_k, p);
  }
}

}  // namespace lowbit::moe
