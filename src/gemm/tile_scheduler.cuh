// Persistent tile scheduler: a fixed grid of CTAs walks "work units" (an output tile, or one
// K-range of it when K is split) in a rasterized order that keeps concurrently running CTAs
// on neighbouring tiles, so their A rows and B columns are shared in L2.
// Producer and consumers of a CTA walk the same sequence, so no unit is ever handed out
// through memory: unit u of CTA b is b + u * gridDim.x.
#pragma once

#include <cstdint>

namespace lowbit::gemm {

struct WorkUnit {
  int m_block;   // output tile row (in tiles)
  int n_block;   // output tile column (in tiles)
  int tile;      // linear tile id (for split-K bookkeeping)
  int split;     // which K range of the tile
  int kb_begin;  // first K block (of kBlockK) of this unit
  int kb_end;    // one past the last
};

struct TileSchedule {
  int tiles_m = 0;
  int tiles_n = 0;
  int k_blocks = 0;
  int splits = 1;
  int group_m = 8;  // rasterization: walk group_m tile rows, column by column, then the next group

  __host__ __device__ int num_tiles() const { return tiles_m * tiles_n; }
  __host__ __device__ int num_units() const { return num_tiles() * splits; }

  // The splits of one tile are adjacent unit ids, so they run in the same wave and the last
  // one to finish does the fix-up without waiting on a later wave.
  __host__ __device__ WorkUnit unit(int u) const {
    WorkUnit w;
    w.split = u % splits;
    w.tile = u / splits;
    const int per_group = group_m * tiles_n;
    const int group = w.tile / per_group;
    const int first_m = group * group_m;
    const int rows_in_group = (tiles_m - first_m) < group_m ? (tiles_m - first_m) : group_m;
    const int r = w.tile - group * per_group;
    w.m_block = first_m + r % rows_in_group;
    w.n_block = r / rows_in_group;
    // Balanced K ranges: split s covers [s*kb/S, (s+1)*kb/S).
    w.kb_begin = static_cast<int>((static_cast<int64_t>(w.split) * k_blocks) / splits);
    w.kb_end = static_cast<int>((static_cast<int64_t>(w.split + 1) * k_blocks) / splits);
    return w;
  }
};

}  // namespace lowbit::gemm
