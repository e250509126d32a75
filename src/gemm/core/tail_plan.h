// The last partial wave of a persistent grid whose units are whole tiles of equal K: its tiles cut
// into K parts, so that the wave ends with up to every CTA busy instead of a few. Only for output
// that the parts can add into (the block-scaled stacked problems' row scatter, in atomic mode).
// The plan is made on the device where the tile count is known (the fused MoE's layout stage) and
// stored after the walk's tile_start; the walk reads it (blockscaled::StackedProblems).
#pragma once

#include <cuda_runtime.h>  // __host__ __device__ for host-only includers

namespace lowbit::gemm {

struct TailPlan {
  int whole;       // units before the tail: whole tiles
  int log2_parts;  // K parts per tail tile, log2 (0, 1 or 2)
  int units;       // every unit, the parts counted
};

// Ints stored after tile_start[groups]: whole, log2_parts, units.
inline constexpr int kTailPlanInts = 3;

// `tiles` whole tiles over `grid` CTAs, `kblocks` K blocks each: the tail (tiles % grid) cut into
// as many parts as the grid holds, at most 4 and each at least one K block. grid 0: no cut.
__host__ __device__ inline TailPlan tail_plan(int tiles, int grid, int kblocks) {
  const int tail = grid > 0 ? tiles % grid : 0;
  int l = 0;
  if (tail > 0) {
    if (4 * tail <= grid && kblocks >= 4) l = 2;
    else if (2 * tail <= grid && kblocks >= 2) l = 1;
  }
  return TailPlan{tiles - tail, l, tiles - tail + (tail << l)};
}

// Unit u's tile and K blocks [*kb_begin, *kb_end) under `plan` (whole tiles: all kblocks).
__host__ __device__ inline int tail_plan_unit(int u, int whole, int log2_parts, int kblocks, int* kb_begin,
                                              int* kb_end) {
  if (u < whole) {
    *kb_begin = 0;
    *kb_end = kblocks;
    return u;
  }
  const int part = (u - whole) & ((1 << log2_parts) - 1);
  *kb_begin = (part * kblocks) >> log2_parts;
  *kb_end = ((part + 1) * kblocks) >> log2_parts;
  return whole + ((u - whole) >> log2_parts);
}

}  // namespace lowbit::gemm
