// Stage 1, routing: one warp per token. Softcap -> softmax over the experts -> top-k by repeated
// warp arg-max (ties to the lower id) -> optional renormalization. The token's softcapped logits
// stay in shared memory; lane l owns experts l, l + 32, ... and remembers which of them it has
// already given away in a 32-bit mask (hence experts <= 1024).
#pragma once

#include <cuda_bf16.h>

#include <climits>
#include <cstdint>

#include "moe/workspace.h"

namespace lowbit::moe {

constexpr int kRouteWarps = 4;

__device__ __forceinline__ float logit_as_float(float v) { return v; }
__device__ __forceinline__ float logit_as_float(__nv_bfloat16 v) { return __bfloat162float(v); }

// (value, id) order of the selection: larger value first, the lower id on ties. An empty
// candidate (id INT_MAX) loses to everything.
__device__ __forceinline__ bool picks_before(float v, int id, float best, int best_id) {
  return best_id == INT_MAX || (id != INT_MAX && (v > best || (v == best && id < best_id)));
}

template <class LogitT>
__global__ void __launch_bounds__(32 * kRouteWarps)
    route_kernel(const LogitT* __restrict__ logits, int m, int experts, int top_k, float softcap, bool renormalize,
                 int32_t* __restrict__ ids, float* __restrict__ weights) {
  extern __shared__ float s_logits[];  // [kRouteWarps][experts]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int t = blockIdx.x * kRouteWarps + warp;
  if (t >= m) return;  // no block-wide barrier below
  float* v = s_logits + warp * experts;
  const LogitT* row = logits + static_cast<int64_t>(t) * experts;

  float mx = -INFINITY;
  for (int e = lane; e < experts; e += 32) {
    float x = logit_as_float(row[e]);
    if (softcap > 0.0f) x = softcap * tanhf(x / softcap);
    v[e] = x;
    mx = fmaxf(mx, x);
  }
#pragma unroll
  for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  float sum = 0.0f;
  for (int e = lane; e < experts; e += 32) sum += expf(v[e] - mx);
#pragma unroll
  for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);

  uint32_t taken = 0;
  float my_val = 0.0f;
  int my_id = 0;
  for (int j = 0; j < top_k; ++j) {
    float best = -INFINITY;
    int best_id = INT_MAX;
    for (int i = 0, e = lane; e < experts; ++i, e += 32)
      if (!((taken >> i) & 1u) && picks_before(v[e], e, best, best_id)) {
        best = v[e];
        best_id = e;
      }
#pragma unroll
    for (int o = 16; o > 0; o /= 2) {
      const float ob = __shfl_xor_sync(0xffffffffu, best, o);
      const int oid = __shfl_xor_sync(0xffffffffu, best_id, o);
      if (picks_before(ob, oid, best, best_id)) {
        best = ob;
        best_id = oid;
      }
    }
    if (best_id % 32 == lane) taken |= 1u << (best_id / 32);
    if (lane == j) {
      my_val = best;
      my_id = best_id;
    }
  }
  float p = lane < top_k ? expf(my_val - mx) / sum : 0.0f;
  if (renormalize) {
    float s = p;
#pragma unroll
    for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
    p = p / s;
  }
  if (lane < top_k) {
    ids[static_cast<int64_t>(t) * top_k + lane] = my_id;
    weights[static_cast<int64_t>(t) * top_k + lane] = p;
  }
}

}  // namespace lowbit::moe
