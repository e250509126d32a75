// Stage 1, routing: one warp per token. Softcap -> softmax over the experts -> top-k (ties to the
// lower id) -> optional renormalization. Lane l holds experts l, l + 32, ... in registers
// (kPerLane of them, so experts <= 32 * kPerLane), sorted once per lane; each pick is two warp
// reductions (redux.sync) over the lanes' heads. A token's routing is a serial chain for one
// warp, so its length is the stage's latency at small batches (docs/perf.md, W6 v2).
// Extra blocks past the tokens' ask L2 to start fetching the first experts' weights: when nearly
// every expert receives tokens, the expert GEMM's first wave reads exactly those, and the
// fetch overlaps the routing, layout and gather stages (docs/perf.md, W6).
#pragma once

#include <cuda_bf16.h>

#include <climits>
#include <cstdint>

#include "hopper/grid_dependency.cuh"
#include "hopper/tma.cuh"
#include "moe/workspace.h"

namespace lowbit::moe {

constexpr int kRouteWarps = 4;
// One SM's bulk-copy unit moves about 0.25 TB/s, so the prefetch is spread over one block per SM
// (measured: 25 MB from a single block kept the route kernel alive for 94 us).
constexpr uint32_t kPrefetchChunk = 1u << 16;  // bytes per L2 prefetch request

__device__ __forceinline__ float logit_as_float(float v) { return v; }
__device__ __forceinline__ float logit_as_float(__nv_bfloat16 v) { return __bfloat162float(v); }

// Order-preserving map of floats to unsigned ints and back.
__device__ __forceinline__ uint32_t order_code(float v) {
  const uint32_t b = __float_as_uint(v);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float code_value(uint32_t c) {
  return __uint_as_float((c & 0x80000000u) ? (c & 0x7FFFFFFFu) : ~c);
}

struct RoutePrefetch {
  const uint8_t* base;  // the expert weights
  uint64_t bytes;       // 0 = none
};

// Sorts n (a power of two) 64-bit keys descending in registers (bitonic network, every index a
// compile-time constant after unrolling).
template <int kN>
__device__ __forceinline__ void sort_desc(uint64_t (&key)[kN]) {
#pragma unroll
  for (int size = 2; size <= kN; size *= 2)
#pragma unroll
    for (int stride = size / 2; stride > 0; stride /= 2)
#pragma unroll
      for (int i = 0; i < kN; ++i) {
        const int j = i ^ stride;
        if (j > i) {
          const bool desc = (i & size) == 0;  // this run's direction; the last merge is descending
          const uint64_t a = key[i], b = key[j];
          const bool swap = desc ? b > a : a > b;
          key[i] = swap ? b : a;
          key[j] = swap ? a : b;
        }
      }
}

// exp(x - mx), the softmax numerator, where the row's largest logit mx is infinite too: inf - inf
// is NaN, so a row with a +inf logit would weigh every pick NaN. A +inf logit instead takes all
// the weight (shared among the +inf logits), and a row with no finite logit at all (all -inf or
// NaN, e.g. fully masked) weighs every expert alike. reference::route does the same.
__device__ __forceinline__ float softmax_term(float x, float mx) {
  return isinf(mx) ? (x == mx ? 1.0f : 0.0f) : expf(x - mx);
}

// Routes one token's logits `row` with one warp; lane j < top_k writes pick j. Lane l holds
// experts l, l + 32, ... as 64-bit keys (order code of the softcapped logit, then the complement
// of the expert id, so that a larger key is a larger logit or, on a tie, a lower id), sorted per
// lane once. Each pick is then two warp reductions over the lanes' first keys (the largest code,
// then the lowest id holding it) and a shift in the winning lane: no per-pick rescan.
template <class LogitT, int kPerLane>
__device__ __forceinline__ void route_token(const LogitT* __restrict__ row, int experts, int top_k, float softcap,
                                            bool renormalize, int32_t* __restrict__ ids_out,
                                            float* __restrict__ weights_out) {
  const int lane = threadIdx.x % 32;
  // c * tanh(x / c) with one reciprocal: within an ulp of the division, far inside the 1e-6
  // weight tolerance of the reference.
  const float inv_cap = softcap > 0.0f ? 1.0f / softcap : 0.0f;
  float xv[kPerLane];
  uint64_t key[kPerLane];
  float mx = -INFINITY;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = lane + 32 * i;
    float x = -INFINITY;
    key[i] = 0;  // past the experts: below every real key
    if (e < experts) {
      x = logit_as_float(row[e]);
      if (softcap > 0.0f) x = softcap * tanhf(x * inv_cap);
      // A NaN ranks as -inf (it had an order code by its sign bit), and adding +0 turns -0 into
      // +0 (their codes differed, so an IEEE tie went to the id with the positive zero).
      x = isnan(x) ? -INFINITY : x + 0.0f;
      key[i] = (static_cast<uint64_t>(order_code(x)) << 32) | static_cast<uint32_t>(~e);
      mx = fmaxf(mx, x);
    }
    xv[i] = x;
  }
#pragma unroll
  for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i)
    if (lane + 32 * i < experts) sum += softmax_term(xv[i], mx);
#pragma unroll
  for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);

  sort_desc(key);
  int my_id = 0;
  uint32_t my_code = 0;
  for (int j = 0; j < top_k; ++j) {
    const uint32_t head_code = static_cast<uint32_t>(key[0] >> 32);
    const uint32_t top = __reduce_max_sync(0xffffffffu, head_code);
    const uint32_t id =
        __reduce_min_sync(0xffffffffu, head_code == top ? ~static_cast<uint32_t>(key[0]) : 0xFFFFFFFFu);
    if (lane == j) {
      my_id = static_cast<int>(id);
      my_code = top;
    }
    if ((id & 31u) == static_cast<uint32_t>(lane)) {  // this lane's head won: the next one moves up
#pragma unroll
      for (int i = 0; i + 1 < kPerLane; ++i) key[i] = key[i + 1];
      key[kPerLane - 1] = 0;
    }
  }
  float p = 0.0f;
  if (lane < top_k) {
    p = softmax_term(code_value(my_code), mx) / sum;
  }
  if (renormalize) {
    float s = p;
#pragma unroll
    for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
    p = p / s;
  }
  if (lane < top_k) {
    ids_out[lane] = my_id;
    weights_out[lane] = p;
  }
}

template <class LogitT, int kPerLane>
__global__ void __launch_bounds__(32 * kRouteWarps)
    route_kernel(const LogitT* __restrict__ logits, int m, int experts, int top_k, float softcap, bool renormalize,
                 int32_t* __restrict__ ids, float* __restrict__ weights, RoutePrefetch prefetch) {
  hopper::launch_dependents();
  const int route_blocks = (m + kRouteWarps - 1) / kRouteWarps;
  if (static_cast<int>(blockIdx.x) >= route_blocks) {
    const uint64_t chunks = (prefetch.bytes + kPrefetchChunk - 1) / kPrefetchChunk;
    if (threadIdx.x == 0)
      for (uint64_t c = blockIdx.x - route_blocks; c < chunks; c += gridDim.x - route_blocks) {
        const uint64_t at = c * kPrefetchChunk;
        const uint64_t len = prefetch.bytes - at < kPrefetchChunk ? prefetch.bytes - at : kPrefetchChunk;
        hopper::bulk_prefetch_l2(prefetch.base + at, static_cast<uint32_t>(len) & ~15u);
      }
    return;
  }
  const int t = blockIdx.x * kRouteWarps + static_cast<int>(threadIdx.x) / 32;
  if (t >= m) return;  // no block-wide barrier below
  hopper::grid_dependency_wait();
  route_token<LogitT, kPerLane>(logits + static_cast<int64_t>(t) * experts, experts, top_k, softcap, renormalize,
                                ids + static_cast<int64_t>(t) * top_k, weights + static_cast<int64_t>(t) * top_k);
}

}  // namespace lowbit::moe
