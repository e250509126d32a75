// The expert GEMM's epilogue: the weighted scatter-reduce of the seed, fused. Both consumer
// warpgroups drop their accumulators into a token-major shared tile (one 128-float row per
// token: their 64 weight rows x token-tile, transposed), then each of the 8
// consumer warps takes whole token rows: 32 lanes x float4 = the 128 columns, scaled by the
// routing weight, and either
//  - atomic mode: added into the token's FP32 output row (Y, or the FP32 sums that the finish
//    stage converts to BF16) with one vector atomic per lane, or
//  - deterministic mode: stored as the (token, slot) pair's own row, summed in a fixed order by
//    the finish stage.
#pragma once

#include <cstdint>

#include "hopper/named_barrier.cuh"
#include "moe/expert_tiles.cuh"
#include "moe/workspace.h"

namespace lowbit::moe {

// Where row c of a unit's token tile goes.
struct RowTarget {
  int token;     // output row (atomic mode); < 0: the row is no routing pair's, skipped
  int pair;      // token * top_k + slot (deterministic mode: the pair's own row)
  float weight;  // routing weight
};

// The sorted rows the gather stage wrote: row x_row0 + c holds routing pair row_pair[...].
struct SortedRows {
  const MoeParams& p;
  __device__ __forceinline__ RowTarget operator()(const ExpertUnit& u, int c) const {
    const int r = u.x_row0 + c;
    const int pair = p.row_pair[r];
    return RowTarget{pair / p.top_k, pair, p.row_weight[r]};
  }
};

template <class T>
struct ScatterEpilogue {
  static constexpr int kConsumerThreads = 128 * T::kConsumerWarpgroups;

  template <int R, class RowSource = SortedRows>
  __device__ __forceinline__ void store(typename T::SharedStorage& ss, int consumer_wg, const ExpertUnit& u,
                                        const MoeParams& p, const float (&acc)[R], const RowSource& rows) const {
    const int t = threadIdx.x % 128, warp = t / 32, lane = t % 32;
    // The previous unit's rows are read out by every warp before anyone overwrites them.
    hopper::named_barrier_sync(hopper::NamedBarrier::kConsumers, kConsumerThreads);
    const int row = consumer_wg * 64 + warp * 16 + lane / 4;
    const int col = 2 * (lane % 4);
    // Swap-AB: fragment columns are tokens, transposed into token rows.
#pragma unroll
    for (int g = 0; g < R / 4; ++g) {
      ss.out[8 * g + col][row] = acc[4 * g + 0];
      ss.out[8 * g + col + 1][row] = acc[4 * g + 1];
      ss.out[8 * g + col][row + 8] = acc[4 * g + 2];
      ss.out[8 * g + col + 1][row + 8] = acc[4 * g + 3];
    }
    hopper::named_barrier_sync(hopper::NamedBarrier::kConsumers, kConsumerThreads);
    // Each lane fetches one of the warp's row targets up front (one round trip per unit, not
    // one per row); the row loop broadcasts them.
    constexpr int kRowsPerWarp = T::kTokens / 8;
    static_assert(kRowsPerWarp <= 32, "one row target per lane");
    const int first = consumer_wg * 4 + warp;
    RowTarget mine{-1, -1, 0.0f};
    if (lane < kRowsPerWarp && first + 8 * lane < u.rows) mine = rows(u, first + 8 * lane);
    const int n = u.n0 + 4 * lane;
    const bool inside = n < p.n;  // n is a multiple of 16: a lane's four columns are all in or all out
    float* atomic_dst = p.y_fp32 ? static_cast<float*>(p.y) : p.sums;
#pragma unroll 4
    for (int i = 0; i < kRowsPerWarp; ++i) {
      const int c = first + 8 * i;
      if (c >= u.rows) break;
      const int token = __shfl_sync(0xffffffffu, mine.token, i);
      const int pair = __shfl_sync(0xffffffffu, mine.pair, i);
      const float wt = __shfl_sync(0xffffffffu, mine.weight, i);
      if (token < 0 || !inside) continue;
      float4 v = *reinterpret_cast<const float4*>(&ss.out[c][4 * lane]);
      v.x *= wt;
      v.y *= wt;
      v.z *= wt;
      v.w *= wt;
      if (p.deterministic) {
        *reinterpret_cast<float4*>(p.sums + static_cast<int64_t>(pair) * p.n + n) = v;
      } else {
        atomicAdd(reinterpret_cast<float4*>(atomic_dst + static_cast<int64_t>(token) * p.n + n), v);
      }
    }
  }
};

}  // namespace lowbit::moe
