// Persistent tile scheduler: a fixed grid of CTAs walks "work units" (an output tile, or one
// K-range of it when K is split) in a rasterized order that keeps concurrently running CTAs
// on neighbouring tiles, so their A rows and B columns are shared in L2.
// Producer and consumers of a CTA walk the same sequence, so no unit is ever handed out
// through memory: unit u of CTA b is b + u * gridDim.x.
#pragma once

#include <cuda_runtime.h>  // __host__ __device__ for host-only includers

#include <cstdint>

namespace lowbit::gemm {

// How one output tile is summed when several units compute parts of its K range (split-K, or
// the stream-K tail; gemm/split_k.cuh): `parts` units each store an FP32 partial into workspace
// slots [slot0, slot0 + parts), this one into slot0 + part, and count themselves in on counter
// `counter`; the last to arrive sums the slots in part order and runs the epilogue.
// TileSchedule::fixup(u) works it out after the unit's mainloop, so it holds no registers there.
struct FixUp {
  int parts = 1;
  int part = 0;
  int slot0 = 0;
  int counter = 0;
};

struct WorkUnit {
  int m_block;   // output tile row (in tiles)
  int n_block;   // output tile column (in tiles)
  int tile;      // linear tile id
  int split;     // which K range of the tile (split-K; 0 otherwise)
  int kb_begin;  // first K block (of kBlockK) of this unit
  int kb_end;    // one past the last
  // A stream-K chunk that ends inside its first tile has no second piece: an empty unit, which
  // every role of the kernel skips (no loads, no barrier phase, no store).
  __host__ __device__ bool empty() const { return kb_begin >= kb_end; }
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

// Two ways to give every CTA the same amount of work when whole tiles do not:
// - split-K (`splits` > 1): every tile is cut into `splits` K ranges (small M: too few tiles);
// - a stream-K tail (`sk_chunks` > 0, splits == 1): the first `dp_tiles` tiles (whole waves) run
//   as whole units, and the K blocks of the remaining tiles, laid end to end, are cut into
//   `sk_chunks` (= the grid) contiguous ranges of equal length, one per CTA. A range is shorter
//   than a tile, so it spans at most two: CTA b owns two units after its whole tiles, the part of
//   its range in its first tile and the part in the next (possibly empty). Without it the last
//   wave of 2048 tiles on 132 SMs runs 68 tiles while 64 SMs idle (docs/perf.md W1 session 25).
struct TileSchedule {
  int tiles_m = 0;
  int tiles_n = 0;
  int k_blocks = 0;
  int splits = 1;
  int group_m = 8;  // rasterization: walk group_m tile rows, column by column, then the next group
  int sk_chunks = 0;  // stream-K tail: CTAs sharing the tail tiles (0 = none)
  int dp_tiles = 0;   // with a stream-K tail: tiles run whole (a multiple of sk_chunks)
  int sk_len = 0;     // K blocks per chunk; the first sk_longer chunks take one more
  int sk_longer = 0;

  __host__ __device__ int num_tiles() const { return tiles_m * tiles_n; }
  // Turns on the stream-K tail for a grid of `grid` CTAs (splits must be 1). Whole waves stay
  // whole tiles; with no partial wave there is nothing to share and nothing changes. Every chunk
  // gets at least one K block, so a tile's parts are exactly the chunks that overlap it. The
  // tail's K blocks are counted in 32 bits (a longer tail runs without it).
  __host__ __device__ void set_stream_k(int grid) {
    const int tiles = num_tiles();
    dp_tiles = grid > 0 ? tiles / grid * grid : tiles;
    const int64_t tail_blocks = static_cast<int64_t>(tiles - dp_tiles) * k_blocks;
    if (splits != 1 || tail_blocks == 0 || tail_blocks + k_blocks > 0x7fffffff) {
      dp_tiles = 0;
      sk_chunks = 0;
      return;
    }
    sk_chunks = static_cast<int>(tail_blocks < grid ? tail_blocks : grid);
    sk_len = static_cast<int>(tail_blocks / sk_chunks);
    sk_longer = static_cast<int>(tail_blocks % sk_chunks);
  }
  __host__ __device__ int num_units() const { return sk_chunks > 0 ? dp_tiles + 2 * sk_chunks : num_tiles() * splits; }
  // Units before this one are whole tiles walked in whole waves (all of them without a tail).
  __host__ __device__ int whole_units() const { return sk_chunks > 0 ? dp_tiles : num_units(); }
  // Workspace for the fix-up: counters (one per tile summed from parts) and partial slots (one
  // per part).
  __host__ __device__ int fixup_counters() const {
    return sk_chunks > 0 ? num_tiles() - dp_tiles : splits > 1 ? num_tiles() : 0;
  }
  __host__ __device__ int fixup_slots() const {
    // Stream-K: the part of chunk c in tail tile t takes slot t + c. Walking the parts in K
    // order, each step moves to the next tile or the next chunk (or both), so t + c only grows:
    // distinct slots, fewer than tail tiles + chunks.
    return sk_chunks > 0 ? num_tiles() - dp_tiles + sk_chunks - 1 : splits > 1 ? num_tiles() * splits : 0;
  }

  // The splits of one tile are adjacent unit ids, so they run in the same wave and the last
  // one to finish does the fix-up without waiting on a later wave.
  __host__ __device__ WorkUnit unit(int u) const {
    if (sk_chunks > 0 && u >= dp_tiles) return stream_k_unit(u - dp_tiles);
    WorkUnit w;
    w.split = u % splits;
    w.tile = u / splits;
    raster_tile(w.tile, tiles_m, tiles_n, group_m, &w.m_block, &w.n_block);
    // Balanced K ranges: split s covers [s*kb/S, (s+1)*kb/S).
    w.kb_begin = static_cast<int>((static_cast<int64_t>(w.split) * k_blocks) / splits);
    w.kb_end = static_cast<int>((static_cast<int64_t>(w.split + 1) * k_blocks) / splits);
    return w;
  }

  // How unit u's tile is summed (parts == 1: it is not; the unit finishes its tile alone).
  __host__ __device__ FixUp fixup(int u) const {
    FixUp f;
    if (sk_chunks > 0) {
      if (u < dp_tiles) return f;
      const int v = u - dp_tiles;
      const int c = v % sk_chunks;
      const int t = stream_k_begin(c, v / sk_chunks) / k_blocks;  // tail tile
      const int c_first = chunk_of(t * k_blocks);
      const int c_last = chunk_of((t + 1) * k_blocks - 1);
      f.parts = c_last - c_first + 1;
      f.part = c - c_first;
      f.slot0 = t + c_first;
      f.counter = t;
    } else if (splits > 1) {
      const int tile = u / splits;
      f.parts = splits;
      f.part = u % splits;
      f.slot0 = tile * splits;
      f.counter = tile;
    }
    return f;
  }

 private:
  // Chunk c covers tail K blocks [chunk_begin(c), chunk_begin(c + 1)) of the tail tiles laid end
  // to end (fewer than 2^31: set_stream_k).
  __host__ __device__ int chunk_begin(int c) const { return c * sk_len + (c < sk_longer ? c : sk_longer); }
  // The chunk that holds tail K block x.
  __host__ __device__ int chunk_of(int x) const {
    const int long_blocks = sk_longer * (sk_len + 1);
    return x < long_blocks ? x / (sk_len + 1) : sk_longer + (x - long_blocks) / sk_len;
  }
  // The first tail K block of piece `piece` of chunk c: its start, or the start of the tile
  // after the one it starts in.
  __host__ __device__ int stream_k_begin(int c, int piece) const {
    const int lo = chunk_begin(c);
    return piece == 0 ? lo : (lo / k_blocks + 1) * k_blocks;
  }
  // Unit v of the tail: piece v / sk_chunks of chunk v % sk_chunks.
  __host__ __device__ WorkUnit stream_k_unit(int v) const {
    const int c = v % sk_chunks;
    const int piece = v / sk_chunks;
    const int hi = chunk_begin(c + 1);
    const int begin = stream_k_begin(c, piece);
    const int first_tile_end = stream_k_begin(c, 1);
    const int end = piece == 0 ? (hi < first_tile_end ? hi : first_tile_end) : hi;
    WorkUnit w;
    if (end <= begin) {  // no second piece; its "tile" may lie past the last one
      w.tile = w.split = w.m_block = w.n_block = w.kb_begin = w.kb_end = 0;
      return w;
    }
    const int t = begin / k_blocks;  // tail tile
    w.tile = dp_tiles + t;
    w.split = 0;
    raster_tile(w.tile, tiles_m, tiles_n, group_m, &w.m_block, &w.n_block);
    w.kb_begin = begin - t * k_blocks;
    w.kb_end = end - t * k_blocks;
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
