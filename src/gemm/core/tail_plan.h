// The last partial wave of a persistent grid whose units are whole tiles of equal K: its tiles cut
// into K parts, so that the wave ends sooner than one whole unit time. Only for output that the
// parts can add into (the block-scaled stacked problems' row scatter, in atomic mode).
// The plan is made on the device where the tile count is known (the fused MoE's layout stage) and
// stored after the walk's tile_start; the walk reads it (blockscaled::StackedProblems).
#pragma once

#include <cuda_runtime.h>  // __host__ __device__ for host-only includers

namespace lowbit::gemm {

struct TailPlan {
  int whole;  // units before the tail: whole tiles
  int parts;  // K parts per tail tile: 1 to 4
  int units;  // every unit, the parts counted
};

// Ints stored after tile_start[groups]: whole, parts, units, at these offsets from
// tile_start + groups (tile_start[groups] itself is the whole-tile count).
inline constexpr int kTailPlanInts = 3;
inline constexpr int kTailPlanWhole = 1, kTailPlanParts = 2, kTailPlanUnits = 3;

// x / d for d in 1..4 and 0 <= x < 2^15, without a division (3: a multiply and a shift).
__host__ __device__ inline int div_small(int x, int d) {
  return d == 3 ? (x * 43691) >> 17 : x >> (d >> 1);
}

// What a unit costs besides its K blocks, in K blocks: the row scatter's reductions of a 128 x 256
// FP32 tile, 9-11% of a 16-K-block unit (docs/perf.md W6, "where the token-rows GEMM's time
// goes", call 306). Every part pays it again.
inline constexpr int kTailPartCostKBlocks = 2;

// `tiles` whole tiles over `grid` CTAs, `kblocks` K blocks each. The `tail` (tiles % grid) tiles of
// the last wave are cut into the number of parts P (1 to 4, each at least `min_part` K blocks) that
// ends the wave soonest by this model: ceil(tail * P / grid) rounds of ceil(kblocks / P) +
// kTailPartCostKBlocks; the fewest parts among equals. grid 0: no cut; nor past 2^13 tail tiles or
// K blocks, where tail_plan_unit's quotients end. (The model leaves out that a partial wave runs
// faster than a full one, with fewer CTAs sharing L2 and DRAM: where parts are short it predicts
// gains that do not come, hence `min_part`; docs/perf.md W6 v9.)
__host__ __device__ inline TailPlan tail_plan(int tiles, int grid, int kblocks, int min_part) {
  const int tail = grid > 0 ? tiles % grid : 0;
  const int part_min = min_part > 1 ? min_part : 1;
  int best = 1;
  if (tail > 0 && tail < (1 << 13) && kblocks < (1 << 13) && part_min < (1 << 13)) {
    int best_len = kblocks + kTailPartCostKBlocks;  // one round of whole tiles
    for (int p = 2; p <= 4 && p * part_min <= kblocks; ++p) {
      const int rounds = (tail * p - 1) / grid + 1;  // tail * p < 2^15: no overflow, whatever grid
      const int len = rounds * ((kblocks + p - 1) / p + kTailPartCostKBlocks);
      if (len < best_len) {
        best = p;
        best_len = len;
      }
    }
  }
  return TailPlan{tiles - tail, best, tiles - tail + tail * best};
}

// Unit u's tile and K blocks [*kb_begin, *kb_end) under a plan (whole tiles: all kblocks). Its
// division-free quotients stay under 2^15 where tail_plan cuts (tail and kblocks under 2^13).
__host__ __device__ inline int tail_plan_unit(int u, int whole, int parts, int kblocks, int* kb_begin, int* kb_end) {
  if (u < whole) {
    *kb_begin = 0;
    *kb_end = kblocks;
    return u;
  }
  const int j = u - whole;
  const int tile = div_small(j, parts);
  const int part = j - tile * parts;
  *kb_begin = div_small(part * kblocks, parts);
  *kb_end = div_small((part + 1) * kblocks, parts);
  return whole + tile;
}

}  // namespace lowbit::gemm
