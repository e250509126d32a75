// The expert GEMM's tile scheduler: unit u -> (expert, token tile, 128-wide N block, K split).
// Experts own consecutive unit ranges (tile_start, built by the layout stage); inside an
// expert the token tiles vary fastest, so the CTAs working at the same time on one expert read
// the same weight tile (one HBM read, the rest from L2).
#pragma once

#include "gemm/core/tile_scheduler.cuh"
#include "moe/workspace.h"

namespace lowbit::moe {

struct ExpertUnit {
  int expert;
  int x_row0;  // first sorted activation row of the token tile
  int rows;    // tokens in the tile (1..token_tile)
  int w_row0;  // first row of W viewed as [experts * n, k]
  int n0;      // first output column
  int nb;      // n0 / 128
  int kb_begin, kb_end;
};

struct ExpertTiles {
  const MoeParams& p;
  gemm::GroupedTileSchedule sched;  // tile_start in shared memory
  const int* counts;                // the layout's counts and offsets, in shared memory
  const int* offsets;

  __device__ __forceinline__ int num_units() const { return sched.num_units(); }
  __device__ __forceinline__ ExpertUnit resolve(int u) const {
    ExpertUnit v;
    v.expert = sched.group_of(u);
    const int local = u - sched.tile_start[v.expert];
    const int count = counts[v.expert];
    const int ttiles = (count + p.token_tile - 1) / p.token_tile;
    const int tt = local % ttiles;
    const int rest = local / ttiles;
    const int split = rest % p.splits;
    v.nb = rest / p.splits;
    v.x_row0 = offsets[v.expert] + tt * p.token_tile;
    v.rows = min(p.token_tile, count - tt * p.token_tile);
    v.n0 = v.nb * 128;
    v.w_row0 = v.expert * p.n + v.n0;
    v.kb_begin = split * p.kblocks / p.splits;
    v.kb_end = (split + 1) * p.kblocks / p.splits;
    return v;
  }
};

}  // namespace lowbit::moe
