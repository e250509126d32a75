// Stage 1, routing: one warp per token. Softcap -> softmax over the experts -> top-k by repeated
// warp arg-max (ties to the lower id) -> optional renormalization. Lane l holds experts l,
// l + 32, ... in registers (kPerLane of them, so experts <= 32 * kPerLane) and keeps its best
// remaining candidate; each round the warp takes the maximum of the lanes' candidates as one
// 64-bit key (ordered value bits, then the complement of the id) and only the winning lane
// looks for its next candidate.
// Extra blocks past the tokens' ask L2 to start fetching the first experts' weights: when nearly
// every expert receives tokens, the expert GEMM's first wave reads exactly those, and the
// fetch overlaps the routing, layout and gather stages (docs/perf.md, W6).
#pragma once

#include <cuda_bf16.h>

#include <climits>
#include <cstdint>

#include "hopper/tma.cuh"
#include "moe/workspace.h"

namespace lowbit::moe {

constexpr int kRouteWarps = 4;
constexpr uint32_t kPrefetchChunk = 1u << 18;  // bytes per L2 prefetch request

__device__ __forceinline__ float logit_as_float(float v) { return v; }
__device__ __forceinline__ float logit_as_float(__nv_bfloat16 v) { return __bfloat162float(v); }

// Larger value first, then the lower id; an empty slot (key 0) loses to everything.
__device__ __forceinline__ uint64_t pick_key(float v, int id) {
  const uint32_t b = __float_as_uint(v);
  const uint32_t ordered = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
  return (static_cast<uint64_t>(ordered) << 32) | (0xFFFFFFFFu - static_cast<uint32_t>(id));
}

struct RoutePrefetch {
  const uint8_t* base;  // the expert weights
  uint64_t bytes;       // 0 = none
};

template <class LogitT, int kPerLane>
__global__ void __launch_bounds__(32 * kRouteWarps)
    route_kernel(const LogitT* __restrict__ logits, int m, int experts, int top_k, float softcap, bool renormalize,
                 int32_t* __restrict__ ids, float* __restrict__ weights, RoutePrefetch prefetch) {
  const int route_blocks = (m + kRouteWarps - 1) / kRouteWarps;
  if (static_cast<int>(blockIdx.x) >= route_blocks) {
    const uint64_t chunks = (prefetch.bytes + kPrefetchChunk - 1) / kPrefetchChunk;
    const uint64_t stride = static_cast<uint64_t>(gridDim.x - route_blocks) * blockDim.x;
    for (uint64_t c = (blockIdx.x - route_blocks) * blockDim.x + threadIdx.x; c < chunks; c += stride) {
      const uint64_t at = c * kPrefetchChunk;
      const uint64_t len = prefetch.bytes - at < kPrefetchChunk ? prefetch.bytes - at : kPrefetchChunk;
      hopper::bulk_prefetch_l2(prefetch.base + at, static_cast<uint32_t>(len) & ~15u);
    }
    return;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int t = blockIdx.x * kRouteWarps + warp;
  if (t >= m) return;  // no block-wide barrier below
  const LogitT* row = logits + static_cast<int64_t>(t) * experts;

  float v[kPerLane];
  float mx = -INFINITY;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = lane + 32 * i;
    float x = -INFINITY;
    if (e < experts) {
      x = logit_as_float(row[e]);
      if (softcap > 0.0f) x = softcap * tanhf(x / softcap);
    }
    v[i] = x;
    mx = fmaxf(mx, x);
  }
#pragma unroll
  for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i)
    if (lane + 32 * i < experts) sum += expf(v[i] - mx);
#pragma unroll
  for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);

  uint32_t left = 0;  // bit i: expert lane + 32 i is still a candidate
#pragma unroll
  for (int i = 0; i < kPerLane; ++i)
    if (lane + 32 * i < experts) left |= 1u << i;
  auto best_of_lane = [&]() {
    uint64_t best = 0;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const uint64_t key = pick_key(v[i], lane + 32 * i);
      if (((left >> i) & 1u) && key > best) best = key;
    }
    return best;
  };
  uint64_t mine = best_of_lane();
  uint64_t my_pick = 0;
  for (int j = 0; j < top_k; ++j) {
    uint64_t best = mine;
#pragma unroll
    for (int o = 16; o > 0; o /= 2) {
      const uint64_t other = __shfl_xor_sync(0xffffffffu, best, o);
      best = other > best ? other : best;
    }
    if (lane == j) my_pick = best;
    if (best == mine) {  // this lane's candidate won: drop it, find the next
      const int id = static_cast<int>(0xFFFFFFFFu - static_cast<uint32_t>(best));
      left &= ~(1u << (id / 32));
      mine = best_of_lane();
    }
  }
  const int my_id = static_cast<int>(0xFFFFFFFFu - static_cast<uint32_t>(my_pick));
  float p = 0.0f;
  if (lane < top_k) {
    const uint32_t ordered = static_cast<uint32_t>(my_pick >> 32);
    const uint32_t b = (ordered & 0x80000000u) ? (ordered & 0x7FFFFFFFu) : ~ordered;
    p = expf(__uint_as_float(b) - mx) / sum;
  }
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
