// The row scatter: the block-scaled family's epilogue for stacked problems
// (gemm/blockscaled/problems.cuh), which the core's overlapped unit loop runs in place of its own
// (T::RowScatter, gemm/core/kernel.cuh). Each output row of a tile goes to its own row of another
// matrix, times a weight per row, added or stored (gemm::KernelParams::RowScatter): the fused MoE's
// weighted combine, where a sorted row is a (token, expert) pair whose result adds into the token's
// output row (moe/launch.cu).
// Each warp stages its 16 fragment rows in rounds of 32 FP32 columns (its share of the epilogue
// staging slot, in the TMA store's swizzle), reads them back a row's 128 bytes per eight lanes, and
// adds (or stores) each row's round with vector accesses: every instruction covers whole 128-byte
// lines. No barrier beyond the warp's own: the next unit's first MMAs are in flight here in the
// overlapped kernel. Rows past the group's and columns past N are skipped.
#pragma once

#include <cstdint>

#include "gemm/core/epilogue.cuh"
#include "gemm/core/tile_scheduler.cuh"
#include "gemm/core/traits.cuh"
#include "hopper/prefetch.cuh"

namespace lowbit::blockscaled {

template <class T>
struct RowScatterEpilogue {
  static_assert(T::kOutFp32 && T::kEpiRowBytes == 128 && T::kEpiRoundCols == 32, "rounds of 32 FP32 columns");
  // Asks L1 for the lines of a warp's row targets and weights before the unit's mainloop, so the
  // epilogue's loads hit L1. (Looked up in the epilogue, each unit waited one L2 round trip with
  // the tensor cores idle; loaded before the mainloop into registers, the 128 x 256 kernel spilled.)
  template <class Unit>
  __device__ __forceinline__ static void prefetch_rows(const gemm::KernelParams& p, const Unit& w, int consumer_wg) {
    // The first and the last of the 16 rows, in both arrays; every lane asks (no branch: the next
    // unit's first MMAs are in flight here in the overlapped kernel).
    const int lane = threadIdx.x % 32;
    const int a_row = w.a_row0 + consumer_wg * 64 + (threadIdx.x % 128) / 32 * 16 + 15 * (lane & 1);
    const void* line = (lane & 2) ? static_cast<const void*>(p.scatter.weight + a_row)
                                  : static_cast<const void*>(p.scatter.target + a_row);
    hopper::prefetch_l1(line);
  }

  // Fragment of m64nN (per warp w, lane l): acc[4*g + 2*h + e] is row 16w + l/4 + 8h, column
  // 8g + 2(l%4) + e. `w` is a stacked unit (its group's row count and its first A row). Each warp
  // stages and writes its own 16 rows, so it waits for nothing but itself.
  template <class Unit>
  __device__ __forceinline__ static void store(typename T::SharedStorage& ss, const gemm::KernelParams& p,
                                               const Unit& w, int consumer_wg, const float (&acc)[T::kBlockN / 2]) {
    const unsigned kAll = 0xffffffffu;
    const int t = threadIdx.x % 128;
    const int warp = t / 32;
    const int lane = t % 32;
    const gemm::KernelParams::RowScatter& s = p.scatter;
    // Lane l < 16 looks up row l of the warp's 16: its target (-1: past the group) and weight.
    const int first = consumer_wg * 64 + warp * 16;  // the warp's first row in the tile
    const bool mine = lane < 16 && w.m_block * T::kBlockM + first + lane < w.m;
    const int target = mine ? __ldg(s.target + w.a_row0 + first + lane) / s.target_div : -1;
    const float weight = mine ? __ldg(s.weight + w.a_row0 + first + lane) : 0.0f;
    uint8_t* buf = ss.epi[consumer_wg][0];
    const int tile_col = w.n_block * T::kBlockN;
    const bool add = s.add;
#pragma unroll
    for (int r = 0; r < T::kEpiRounds; ++r) {
      const int round_col = r * T::kEpiRoundCols;
      if (tile_col + round_col >= w.n) break;  // uniform over the warpgroup
      __syncwarp();  // the previous round's rows are read
#pragma unroll
      for (int gl = 0; gl < T::kEpiRoundCols / 8; ++gl) {
        const int g = (round_col + 8 * gl) / 8;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int byte = 4 * (8 * gl + 2 * (lane % 4));
          *reinterpret_cast<float2*>(gemm::TileEpilogue<T>::staged(buf, warp * 16 + lane / 4 + 8 * h, byte)) =
              make_float2(acc[4 * g + 2 * h], acc[4 * g + 2 * h + 1]);
        }
      }
      __syncwarp();
      // Eight lanes per row (its 128 bytes), four rows per instruction: whole 128-byte lines. (Not
      // unrolled: the four rows' addresses hoisted out of the rounds spilled.)
#pragma unroll 1
      for (int i = 0; i < 4; ++i) {
        const int row = 4 * i + lane / 8;
        const int to = __shfl_sync(kAll, target, row);
        const float wt = __shfl_sync(kAll, weight, row);
        float4 v =
            *reinterpret_cast<const float4*>(gemm::TileEpilogue<T>::staged(buf, warp * 16 + row, 16 * (lane % 8)));
        v.x *= wt;
        v.y *= wt;
        v.z *= wt;
        v.w *= wt;
        const int col = tile_col + round_col + 4 * (lane % 8);  // N is a multiple of 16: 4 columns in or out
        float4* at = reinterpret_cast<float4*>(s.out + static_cast<int64_t>(to) * s.ld + col);
        if (to >= 0 && col < w.n) {
          if (add) atomicAdd(at, v);
          else *at = v;
        }
      }
    }
  }
};

}  // namespace lowbit::blockscaled
