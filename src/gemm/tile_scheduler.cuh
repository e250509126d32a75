// Persistent tile scheduler: a fixed grid of CTAs walks "work units" (an output tile, or one
// K-range of it when K is split) in a rasterized order that keeps concurrently running CTAs
// on neighbouring tiles, so their A rows and B columns are shared in L2.
// Producer and consumers of a CTA walk the same sequence, so no unit is ever handed out
// through memory: unit u of CTA b is b + u * gridDim.x.
#pragma once

#include <cuda_runtime.h>  // __host__ __device__ for host-only includers

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

// The most work units one launch walks. Persistent loops step `u += grid` in an int, and a grid
// is at most a few thousand CTAs: below 2^30 units the step can never wrap past INT_MAX (with
// up to 2^31 - 1 units, u wrapped negative and resolved to negative tiles).
constexpr long long kMaxUnits = (1ll << 30) - 1;

// The tallest band a caller may force. group_m * tiles_n must fit an int: with at most 2^25 tile
// columns (N < 2^31, 64-wide tiles) that holds up to 63, and launchers clamp the band to the
// grid's height as well (a forced group of 2^30 once overflowed it and left tiles unwritten).
constexpr int kMaxRasterGroup = 63;

// Rasterization shared by every layout: tile t of a tiles_m x tiles_n grid, walked in bands of
// group_m tile rows (1 <= group_m <= kMaxRasterGroup), column by column inside a band.
__host__ __device__ __forceinline__ void raster_tile(int t, int tiles_m, int tiles_n, int group_m, int* m_block,
                                                     int* n_block) {
  const int per_band = group_m * tiles_n;
  const int band = t / per_band;
  const int first_m = band * group_m;
  const int rows_in_band = (tiles_m - first_m) < group_m ? (tiles_m - first_m) : group_m;
  const int r = t - band * per_band;
  *m_block = first_m + r % rows_in_band;
  *n_block = r / rows_in_band;
}

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
    raster_tile(w.tile, tiles_m, tiles_n, group_m, &w.m_block, &w.n_block);
    // Balanced K ranges: split s covers [s*kb/S, (s+1)*kb/S).
    w.kb_begin = static_cast<int>((static_cast<int64_t>(w.split) * k_blocks) / splits);
    w.kb_end = static_cast<int>((static_cast<int64_t>(w.split + 1) * k_blocks) / splits);
    return w;
  }
};

// Grouped layout: the tiles of G problems laid end to end. tile_start[g] is the first tile of
// group g (an exclusive prefix sum written on the device, tile_start[G] = all tiles), so the
// whole walk is sized on the device and a CUDA graph can be replayed with new group sizes.
// Units are whole tiles (no split-K); empty groups own no tiles.
struct GroupedTileSchedule {
  const int* tile_start;  // [groups + 1], shared or global memory
  int groups;

  __device__ __forceinline__ int num_units() const { return tile_start[groups]; }
  // The group owning tile t: the last g with tile_start[g] <= t (binary search; empty groups
  // share their start with the next group and are never returned).
  __device__ __forceinline__ int group_of(int t) const {
    int lo = 0, hi = groups - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (tile_start[mid] <= t) lo = mid; else hi = mid - 1;
    }
    return lo;
  }
};

}  // namespace lowbit::gemm
