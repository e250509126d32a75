// Stage 1, routing: one warp per token. Softcap -> softmax over the experts -> top-k by repeated
// warp arg-max (ties to the lower id) -> optional renormalization. Lane l holds experts l,
// l + 32, ... in registers (kPerLane of them, so experts <= 32 * kPerLane) and keeps its best
// remaining candidate; each round takes two warp reductions (redux.sync: the largest value, then
// the lowest id holding it) and only the winning lane looks for its next candidate.
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

// Routes token row `row` (experts logits) with one warp; lane j < top_k writes pick j.
template <class LogitT, int kPerLane>
__device__ __forceinline__ void route_token(const LogitT* __restrict__ row, int experts, int top_k, float softcap,
                                            bool renormalize, int32_t* __restrict__ ids_out,
                                            float* __restrict__ weights_out) {
  const int lane = threadIdx.x % 32;
  // Only order-preserving 32-bit codes of the softcapped logits stay in registers (values are
  // decoded where needed): 32 per lane at 1024 experts.
  uint32_t code[kPerLane];
  uint32_t left = 0;  // bit i: expert lane + 32 i is still a candidate
  float mx = -INFINITY;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = lane + 32 * i;
    float x = -INFINITY;
    if (e < experts) {
      x = logit_as_float(row[e]);
      if (softcap > 0.0f) x = softcap * tanhf(x / softcap);
      left |= 1u << i;
    }
    code[i] = order_code(x);
    mx = fmaxf(mx, x);
  }
#pragma unroll
  for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i)
    if ((left >> i) & 1u) sum += expf(code_value(code[i]) - mx);
#pragma unroll
  for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);

  // A lane's ids grow with i, so its lowest i wins ties inside the lane; redux.min over the ids
  // holding the maximum settles ties across lanes.
  auto best_of_lane = [&](uint32_t* best_code) {
    int best = -1;
    *best_code = 0;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i)
      if (((left >> i) & 1u) && (best < 0 || code[i] > *best_code)) {
        best = i;
        *best_code = code[i];
      }
    return best;
  };
  uint32_t mine_code;
  int mine = best_of_lane(&mine_code);
  int my_id = 0;
  uint32_t my_code = 0;
  for (int j = 0; j < top_k; ++j) {
    const uint32_t top = __reduce_max_sync(0xffffffffu, mine >= 0 ? mine_code : 0u);
    const uint32_t id = __reduce_min_sync(0xffffffffu, (mine >= 0 && mine_code == top)
                                                           ? static_cast<uint32_t>(lane + 32 * mine)
                                                           : 0xFFFFFFFFu);
    if (lane == j) {
      my_id = static_cast<int>(id);
      my_code = top;
    }
    if (static_cast<int>(id) % 32 == lane) {  // this lane's candidate won: drop it, find the next
      left &= ~(1u << (id / 32));
      mine = best_of_lane(&mine_code);
    }
  }
  float p = 0.0f;
  if (lane < top_k) {
    p = expf(code_value(my_code) - mx) / sum;
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
