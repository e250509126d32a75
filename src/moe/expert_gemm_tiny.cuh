// Tiny batches (a few tokens, atomic mode): the routing moves into the expert GEMM. At M = 1 the
// three glue stages are a chain of launches and global round trips that cost more than
// streaming the 8 experts' weights (docs/perf.md, W6 v2). Here every CTA routes the few tokens
// itself (a few KB of logits from L2) instead of waiting for a routing kernel. The small
// tiny_prepare kernel before it zeroes Y and quantizes X into the sorted buffer's first rows.
// Both launch with PDL: tiny_prepare becomes resident under the previous kernel's tail and
// waits there, and this kernel's barrier init runs under tiny_prepare (docs/perf.md, W6 v3).
//
// Units are (expert, 128-row N block, K split) over the distinct experts the tokens picked;
// the token tile holds all M tokens, and a token that did not pick the unit's expert is skipped
// in the scatter.
// Reads top to bottom: static checks -> shared-memory budget -> barrier init -> routing -> role
// split -> mainloop -> epilogue.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>

#include "gemm/blockscaled/mainloop.cuh"
#include "gemm/core/mainloop.cuh"
#include "hopper/grid_dependency.cuh"
#include "hopper/mbarrier.cuh"
#include "hopper/registers.cuh"
#include "hopper/shared_storage.cuh"
#include "hopper/tma.cuh"
#include "moe/expert_gemm_mainloop.cuh"
#include "moe/expert_gemm_roles.cuh"
#include "moe/expert_gemm_traits.cuh"
#include "moe/expert_tiles.cuh"
#include "moe/gather.cuh"
#include "moe/route.cuh"
#include "moe/scatter_epilogue.cuh"
#include "moe/workspace.h"

namespace lowbit::moe {

constexpr int kTinyMaxTokens = 4;
constexpr int kTinyMaxPairs = 32;   // m * top_k: one lane each when the distinct experts are found
constexpr int kTinyRouteLanes = 8;  // route_token<_, 8>: experts <= 256
constexpr int kTinyTokenTile = 16;

// Kernel 1: one block per token zeroes its output row (the GEMM's atomics add into it) and
// quantizes its activation row into sorted row t.
__global__ void __launch_bounds__(kGatherThreads) tiny_prepare_kernel(const __nv_bfloat16* __restrict__ x, MoeParams p) {
  hopper::launch_dependents();
  hopper::grid_dependency_wait();
  const int t = blockIdx.x, tid = threadIdx.x;
  zero_output_rows(p, t, t + 1, tid, kGatherThreads);
  const int row[1] = {t};
  const __nv_bfloat16* xrow = x + static_cast<int64_t>(t) * p.k;
  for (int k0 = (tid / 32) * kChunk; k0 < p.k; k0 += kGatherThreads / 32 * kChunk)
    quantize_chunk(load_chunk(xrow, k0, p.k), k0, row, 1, p.rows, p);
}

// What every CTA knows after routing.
struct TinyRouting {
  int ids[kTinyMaxPairs];
  float weights[kTinyMaxPairs];
  int experts[kTinyMaxPairs];  // the distinct valid ids, ascending
  int num_experts;
  int first_bad;  // first pair with an id outside [0, experts), or -1
};

struct TinyTiles {
  const MoeParams& p;
  const TinyRouting& rt;
  __device__ __forceinline__ int num_units() const { return rt.num_experts * p.nblocks * p.splits; }
  __device__ __forceinline__ ExpertUnit resolve(int u) const {
    const int per_expert = p.nblocks * p.splits;
    ExpertUnit v;
    v.expert = rt.experts[u / per_expert];
    const int rest = u % per_expert;
    const int split = rest % p.splits;
    v.nb = rest / p.splits;
    v.x_row0 = 0;
    v.rows = p.m;
    v.n0 = v.nb * 128;
    v.w_row0 = v.expert * p.n + v.n0;
    v.kb_begin = split * p.kblocks / p.splits;
    v.kb_end = (split + 1) * p.kblocks / p.splits;
    return v;
  }
};

// Token c of the tile adds into Y row c if it picked the unit's expert. Caller routing may name
// one expert in several of a token's slots; units are per distinct expert, so the row carries
// the sum of those slots' weights (as the split pipeline, which adds each pair, and the
// reference do).
struct TinyRows {
  const TinyRouting& rt;
  int top_k;
  __device__ __forceinline__ RowTarget operator()(const ExpertUnit& u, int c) const {
    RowTarget t{-1, -1, 0.0f};
    for (int j = 0; j < top_k; ++j) {
      const int pair = c * top_k + j;
      if (rt.ids[pair] != u.expert) continue;
      if (t.token < 0) t = RowTarget{c, pair, 0.0f};
      t.weight += rt.weights[pair];
    }
    return t;
  }
};

// logits null: the caller's routing (p.ids / p.weights). ids_out / weights_out (null when the
// caller routed): where CTA 0 publishes the routing for moe_workspace_view.
template <class T, class LogitT>
__global__ void __launch_bounds__(T::kThreads, 1)
    expert_gemm_tiny_kernel(const __grid_constant__ CUtensorMap tm_w, const __grid_constant__ CUtensorMap tm_x,
                            const LogitT* __restrict__ logits, float softcap, bool renormalize, int32_t* ids_out,
                            float* weights_out, const MoeParams p) {
  // Static checks.
  static_assert(T::kBlockN == kTinyTokenTile && kTinyMaxTokens <= T::kBlockN, "every token in one tile");
  static_assert(kTinyMaxPairs == 32, "one routing pair per lane of warp 0");
  static_assert(T::kThreads / 32 >= kTinyMaxTokens, "one routing warp per token");

  // Shared-memory budget (the routing table is static shared memory on top).
  static_assert(T::kSmemBytes + sizeof(TinyRouting) <= gemm::kSm90MaxSmemPerBlock,
                "stages + output tile + routing exceed sm_90 shared memory");

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 900)
  extern __shared__ uint8_t smem_raw[];
  __shared__ TinyRouting rt;
  auto& ss = hopper::aligned_shared_storage<typename T::SharedStorage>(smem_raw);
  const int warpgroup = threadIdx.x / 128, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  hopper::launch_dependents();

  // Barrier init, then the wait: nothing global is touched before tiny_prepare (and through its
  // own wait, whatever the caller enqueued before) has completed.
  init_expert_gemm<T>(ss, &tm_w, &tm_x);
  hopper::grid_dependency_wait();

  // Routing: warp t routes token t.
  const int pairs = p.m * p.top_k;
  if (warp < p.m) {
    if (logits) {
      route_token<LogitT, kTinyRouteLanes>(logits + static_cast<int64_t>(warp) * p.experts, p.experts, p.top_k,
                                           softcap, renormalize, rt.ids + warp * p.top_k,
                                           rt.weights + warp * p.top_k);
    } else if (lane < p.top_k) {
      rt.ids[warp * p.top_k + lane] = p.ids[warp * p.top_k + lane];
      rt.weights[warp * p.top_k + lane] = p.weights[warp * p.top_k + lane];
    }
  }
  __syncthreads();
  // The distinct experts in ascending order: lane i holds pair i; a bitmask of the chosen
  // experts (one OR-reduction per 32 ids) gives each id its place, the number of chosen ids
  // below it; the lowest lane holding an id writes it there.
  if (warp == 0) {
    constexpr int kWords = kTinyRouteLanes;  // experts <= 32 * kWords
    const int e = lane < pairs ? rt.ids[lane] : -1;
    const bool valid = lane < pairs && static_cast<unsigned>(e) < static_cast<unsigned>(p.experts);
    uint32_t words[kWords];
#pragma unroll
    for (int w = 0; w < kWords; ++w)
      words[w] = __reduce_or_sync(0xffffffffu, valid && (e >> 5) == w ? 1u << (e & 31) : 0u);
    int place = 0, total = 0;
#pragma unroll
    for (int w = 0; w < kWords; ++w) {
      const uint32_t below = (e >> 5) > w ? 0xffffffffu : (e >> 5) == w ? (1u << (e & 31)) - 1u : 0u;
      place += __popc(words[w] & below);
      total += __popc(words[w]);
    }
    const unsigned same = __match_any_sync(0xffffffffu, valid ? e : -1);
    if (valid && __ffs(same) - 1 == lane) rt.experts[place] = e;
    const unsigned bad = __ballot_sync(0xffffffffu, lane < pairs && !valid);
    if (lane == 0) {
      rt.num_experts = total;
      rt.first_bad = bad ? __ffs(bad) - 1 : -1;
    }
  }
  __syncthreads();
  if (blockIdx.x == 0) {
    if (ids_out && static_cast<int>(threadIdx.x) < pairs) {
      ids_out[threadIdx.x] = rt.ids[threadIdx.x];
      weights_out[threadIdx.x] = rt.weights[threadIdx.x];
    }
    if (threadIdx.x == 0) {
      p.status[0] = rt.first_bad < 0 ? kMoeOk : kMoeBadExpertId;
      p.status[1] = rt.first_bad;
    }
  }
  const TinyTiles tiles{p, rt};
  const int num_units = tiles.num_units();

  // Role split.
  if (warpgroup == 0) {
    hopper::warpgroup_reg_dealloc<T::kProducerRegs>();
    if (threadIdx.x == 0) {
      hopper::RingPosition<T::kStages> pos;
      for (int u = blockIdx.x; u < num_units; u += gridDim.x) {
        const ExpertUnit v = tiles.resolve(u);
        const uint32_t scale_bytes = static_cast<uint32_t>((v.rows + 3) / 4) * 16u;
        const uint32_t bytes = static_cast<uint32_t>(T::kSmemA + T::kSmemB) + scale_bytes;
        const blockscaled::ScaleStageLoad<T> scales{&ss, p.x_scales + v.x_row0, p.rows, scale_bytes};
        gemm::produce_rows<T>(ss, &tm_w, &tm_x, v.w_row0, v.x_row0, v.kb_begin, v.kb_end, bytes, pos, scales);
      }
    }
  } else {
    consume_units<T>(ss, warpgroup - 1, p, tiles, num_units, TinyRows{rt, p.top_k});
  }
#endif
}

}  // namespace lowbit::moe
