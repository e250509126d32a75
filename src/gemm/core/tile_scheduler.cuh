// Persistent tile scheduler: a fixed grid of CTAs walks "work units" (an output tile, or one
// K-range of it when K is split) in a rasterized order that keeps concurrently running CTAs
// on neighbouring tiles, so their A rows and B columns are shared in L2.
// Producer and consumers of a CTA walk the same sequence, so no unit is ever handed out
// through memory: unit u of CTA b is b + u * gridDim.x.
#pragma once

#include <cuda_runtime.h>  // __host__ __device__ for host-only includers

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "common/fast_div.h"

namespace lowbit::gemm {

struct WorkUnit {
  int m_block;   // output tile row (in tiles)
  int n_block;   // output tile column (in tiles)
  int tile;      // linear tile id (for split-K bookkeeping)
  int split;     // which K range of the tile
  int kb_begin;  // first K block (of kBlockK) of this unit
  int kb_end;    // one past the last
  // Uneven columns only, set by UnevenColumnLayout::unit (left unset otherwise: zeroing them
  // here changed the code of kernels that never read them): the tile's first output column and
  // the columns it is short of the full width (0 or kTrim; its B box is that much shorter too).
  int col0;
  int trim;
  // Stream-K walks only (StreamKWalk::unit; unset otherwise, as col0 and trim): how many units sum
  // into this unit's tile (1: a whole tile, no fix-up); col0 then holds the partial slot of the
  // tile's first piece (StreamKWalk::first_slot).
  int parts;
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
  // one to finish does the fix-up without waiting on a later wave. (The dense FP8 and 2:4
  // kernels walk with TileWalk, which gives the same units with reciprocals.)
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

// TileSchedule::unit with the divisions by reciprocals (FastDiv) of the splits, a band's units
// (group_m * tiles_n), the rows of a whole band and of the last one, set once on the host (of()).
// With run-time divisions, placing a unit was a chain of five (two of them 64-bit) between one
// unit's last MMA and the next one's first: 2-4% of the short-K shapes (docs/perf.md, W1 v15).
// Kept apart from TileSchedule, near the end of KernelParams (the dense FP8 and 2:4 kernels).
// The block-scaled kernels do not walk with it: with the reciprocals in their parameters (in the
// middle, or at the end), ptxas rescheduled the grouped block-scaled kernels, which do not use
// them, and BS-grouped ran 4% slower (measured with them in the middle; at the end the grouped
// kernels compiled to the same changed code).
struct TileWalk {
  FastDiv split_div;
  FastDiv band_units;
  FastDiv band_rows;
  FastDiv last_band_rows;
  int last_band = 0;

  // Host only. s.group_m must lie in [1, s.tiles_m] (the launchers clamp it).
  static TileWalk of(const TileSchedule& s) {
    TileWalk w;
    const int group = s.group_m < 1 ? 1 : s.group_m;
    w.split_div = FastDiv(s.splits);
    // A band holds no more units than the whole walk, whose unit indices are ints; clamped so
    // that an oversized schedule computes no overflow here.
    const int64_t band = static_cast<int64_t>(group) * (s.tiles_n > 0 ? s.tiles_n : 1);
    w.band_units = FastDiv(band < INT32_MAX ? static_cast<int>(band) : INT32_MAX);
    w.band_rows = FastDiv(group);
    w.last_band = s.tiles_m > 0 ? (s.tiles_m - 1) / group : 0;
    w.last_band_rows = FastDiv(s.tiles_m > 0 ? s.tiles_m - w.last_band * group : 1);
    return w;
  }

  // Tile t's band (of group_m tile rows), tile row and tile column, as raster_tile places them
  // (TileSchedule.WalkMatchesTheRaster). The last band's divisor is taken in a branch, or with
  // kSelect in a select: the kernels that walk sit at the register file's edge and ptxas fits
  // each in one form only (the select made the 2:4 E4M3 bn=128 kernel spill; the branch made
  // ptxas serialize the uneven kernel's wgmmas, C7511).
  template <bool kSelect = false>
  __host__ __device__ __forceinline__ void place_tile(const TileSchedule& s, int t, int* band, int* m_block,
                                                      int* n_block) const {
    const int b = band_units.div(t);
    const int r = t - b * band_units.d;
    int row;
    if constexpr (kSelect) {
      const FastDiv& rows = b == last_band ? last_band_rows : band_rows;
      *n_block = rows.div(r);
      row = r - *n_block * rows.d;
    } else if (b == last_band) {
      *n_block = last_band_rows.div(r);
      row = r - *n_block * last_band_rows.d;
    } else {
      *n_block = band_rows.div(r);
      row = r - *n_block * band_rows.d;
    }
    *m_block = b * s.group_m + row;
    *band = b;
  }

  __host__ __device__ __forceinline__ WorkUnit unit(const TileSchedule& s, int u) const {
    WorkUnit w;
    w.tile = split_div.div(u);
    w.split = u - w.tile * s.splits;
    int band;
    place_tile(s, w.tile, &band, &w.m_block, &w.n_block);
    if (s.splits == 1) {
      w.kb_begin = 0;
      w.kb_end = s.k_blocks;
    } else {
      w.kb_begin = static_cast<int>((static_cast<int64_t>(w.split) * s.k_blocks) / s.splits);
      w.kb_end = static_cast<int>((static_cast<int64_t>(w.split + 1) * s.k_blocks) / s.splits);
    }
    return w;
  }
};

// Stream-K over the last tiles (Fp8GemmConfig::stream_k; docs/perf.md W1 v23). The walk deals in
// stacks of `rows` tiles: the tiles of one raster column where the raster is one band (rows =
// tiles_m), else single tiles (rows = 1). CTA b works on row b % rows of the stacks of lane
// b / rows; the lanes' rows-many CTAs run in step, so the tiles of a column read each B block at
// the same time, as the unsplit raster does (dealt one tile at a time, the rows of a column read B
// at different times, and M = 256-512 ran 13-50% slower). The first head_stacks stacks (whole
// waves of the lanes) are whole units, stack c on lane c % lanes. The K blocks of the other
// stacks, stack after stack, are dealt out as one contiguous run per lane, q or q + 1 blocks
// each: every lane does the same work where whole tiles (or K split in equal fractions) leave
// the last wave part empty. A run crosses stack boundaries; each piece of a tile is a unit, and
// CTA b walks b, b + grid, ... up to end_unit(b) as every walk does: its i-th unit is its i-th
// head stack, then its pieces. The pieces of a tile sum through the split-K fix-up
// (WorkUnit::parts of them, in lane order: the same bits whichever finishes last); lane l's
// piece of tail stack t keeps its partial in slot row * row_slots + t + l, so a tile's pieces are
// adjacent and the next stack's start past them (partial_slots). The grid's last grid % rows CTAs
// idle. No CTA waits on another, so the grid need not be resident at once.
struct StreamKWalk {
  int rows = 1;         // tiles per stack
  int lanes = 1;        // grid / rows
  int head_stacks = 0;  // a multiple of lanes
  int tail_stacks = 0;
  int k_blocks = 1;
  int q = 0;  // K blocks of a lane's run ...
  int r = 0;  // ... plus one for the first r lanes
  int row_slots = 0;  // partial slots per row of stacks: tail_stacks + (lanes that get K blocks) - 1
  FastDiv grid_div, rows_div, kb_div, q_div, q1_div;

  // Host only. `rows` is tiles_m where the raster is one band, else 1; stream_k 1 or 2. The tail's
  // K blocks (tail_stacks * k_blocks) must stay below 2^31 (the launchers check).
  static StreamKWalk of(const TileSchedule& s, int grid, int stream_k) {
    StreamKWalk w;
    w.rows = stacks_rows(s, grid);
    w.lanes = (grid < 1 ? 1 : grid) / w.rows;
    w.k_blocks = s.k_blocks < 1 ? 1 : s.k_blocks;
    const int stacks = s.num_tiles() / w.rows;
    w.head_stacks = head_of(stacks, w.lanes, stream_k);
    w.tail_stacks = stacks - w.head_stacks;
    const int64_t tail = static_cast<int64_t>(w.tail_stacks) * w.k_blocks;
    w.q = static_cast<int>(tail / w.lanes);
    w.r = static_cast<int>(tail - static_cast<int64_t>(w.q) * w.lanes);
    w.row_slots = w.tail_stacks == 0 ? 0 : w.tail_stacks + static_cast<int>(std::min<int64_t>(w.lanes, tail)) - 1;
    w.grid_div = FastDiv(grid < 1 ? 1 : grid);
    w.rows_div = FastDiv(w.rows);
    w.kb_div = FastDiv(w.k_blocks);
    w.q_div = FastDiv(w.q);
    w.q1_div = FastDiv(w.q + 1);
    return w;
  }
  static int stacks_rows(const TileSchedule& s, int grid) {
    return s.group_m >= s.tiles_m && s.tiles_m > 1 && s.tiles_m <= grid ? s.tiles_m : 1;
  }
  // The stacks that run whole: the lanes' whole waves, less stream_k - 1 of them.
  static int head_of(int stacks, int lanes, int stream_k) {
    const int waves = stacks / lanes - (stream_k - 1);
    return waves > 0 ? waves * lanes : 0;
  }
  // The workspace's partial slots (0 without a tail).
  int64_t partial_slots() const { return static_cast<int64_t>(rows) * row_slots; }
  int64_t tail_tiles() const { return static_cast<int64_t>(tail_stacks) * rows; }

  // Lane l's first tail K block (its run ends at start(l + 1)).
  __host__ __device__ __forceinline__ int start(int l) const { return l * q + (l < r ? l : r); }
  // The lane whose run holds tail K block x.
  __host__ __device__ __forceinline__ int owner(int x) const {
    const int big = r * (q + 1);
    return x < big ? q1_div.div(x) : r + q_div.div(x - big);
  }
  // One past CTA b's last unit: the bound of its walk.
  __host__ __device__ __forceinline__ int end_unit(int b) const {
    const int l = rows_div.div(b);
    if (l >= lanes) return 0;
    const int s = start(l), e = start(l + 1);
    const int units = head_stacks / lanes + (s == e ? 0 : kb_div.div(e - 1) - kb_div.div(s) + 1);
    return units == 0 ? 0 : (units - 1) * grid_div.d + b + 1;
  }
  // Where the pieces of a tail unit's tile keep their partials, from its split 0 on (set by unit()).
  __host__ __device__ __forceinline__ static int first_slot(const WorkUnit& w) { return w.col0; }
  __host__ __device__ __forceinline__ WorkUnit unit(const TileSchedule& s, const TileWalk& walk, int u) const {
    WorkUnit w;
    const int i = grid_div.div(u);
    const int b = u - i * grid_div.d;
    const int l = rows_div.div(b);
    const int row = b - l * rows;
    const int head_units = head_stacks / lanes;
    int stack;
    if (i < head_units) {
      stack = l + i * lanes;
      w.tile = stack * rows + row;
      w.split = 0;
      w.parts = 1;
      w.kb_begin = 0;
      w.kb_end = k_blocks;
    } else {
      const int first_kb = start(l), end_kb = first_kb + q + (l < r ? 1 : 0);
      const int t = kb_div.div(first_kb) + (i - head_units);
      const int x0 = t * k_blocks;
      stack = head_stacks + t;
      w.tile = t * rows + row;  // the fix-up's counter: tail tiles from 0
      w.kb_begin = first_kb > x0 ? first_kb - x0 : 0;
      w.kb_end = end_kb - x0 < k_blocks ? end_kb - x0 : k_blocks;
      const int first_lane = owner(x0);
      w.split = l - first_lane;
      w.parts = owner(x0 + k_blocks - 1) - first_lane + 1;
      // Where the tile's pieces keep their partials (first_slot; stream-K kernels have even columns).
      w.col0 = row * row_slots + t + first_lane;
    }
    int band;
    walk.place_tile(s, stack * rows + row, &band, &w.m_block, &w.n_block);
    return w;
  }
};

// Whether T walks stream-K (T::kStreamK; StreamKWalk): traits without the member do not.
template <class T, class = void>
struct StreamK : std::false_type {};
template <class T>
struct StreamK<T, std::void_t<decltype(T::kStreamK)>> : std::bool_constant<T::kStreamK> {};

// Uneven columns (Fp8GemmConfig::uneven): a row of tiles_n tiles covers exactly n columns with
// tiles `width` and `width - kTrim` wide, so that N = 8192 is 33 tiles of 240 / 256 columns
// instead of 32 of 256: 2112 tiles of 128 rows fill 16 waves of 132 SMs where 2048 left a
// partial last one (an m64nN wgmma takes N / 2 cycles, any N: a narrower tile costs
// proportionally less; docs/perf.md W1 v13). kTrim = 16 keeps every tile's first column
// on a 32-byte sector of a 16-bit output: with 8 (248-wide tiles) the output stores wrote partial
// sectors and the write-heavy short-K shapes ran 10% slower. `wide` tiles of each row are wide:
// a cyclic run that starts at column band % tiles_n, one column further right each band, so that
// each band's wide tiles fall on other CTAs (at 8192^3 on 132 SMs no CTA runs more than 9 wide
// and 7 narrow tiles, the least possible; the rule before it, aimed at the CTA just past the
// previous band's run, gave 10 and 6). Kept apart from TileSchedule (at the end of the kernel
// parameters) so that kernels without it keep their parameter layout.
struct UnevenColumnLayout {
  static constexpr int kTrim = 16;
  int width = 0;
  int wide = 0;
  int n = 0;  // the output's columns
  FastDiv columns;  // tiles_n as a reciprocal (fp8_uneven_layout)

  // Unit u's tile: the walk's, and its columns. The overlapped kernels run unsplit, so unit u
  // is tile u.
  __host__ __device__ __forceinline__ WorkUnit unit(const TileSchedule& s, const TileWalk& walk, int u) const {
    WorkUnit w;
    int band;
    walk.place_tile</*kSelect=*/true>(s, u, &band, &w.m_block, &w.n_block);
    w.tile = u;
    w.split = 0;
    w.kb_begin = 0;
    w.kb_end = s.k_blocks;
    const int j = w.n_block;
    // The band's run of wide tiles: columns [start, start + wide), wrapping past tiles_n.
    const int start = band - columns.div(band) * s.tiles_n;
    const int end = start + wide;
    int wide_before;  // wide columns left of j
    bool is_wide;
    if (end <= s.tiles_n) {
      wide_before = j < start ? 0 : (j - start < wide ? j - start : wide);
      is_wide = j >= start && j < end;
    } else {
      wide_before = (j < end - s.tiles_n ? j : end - s.tiles_n) + (j > start ? j - start : 0);
      is_wide = j >= start || j < end - s.tiles_n;
    }
    w.col0 = j * (width - kTrim) + kTrim * wide_before;
    w.trim = is_wide ? 0 : kTrim;
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

// Whether T lays its columns out unevenly (KernelTraits::kUneven, UnevenColumnLayout):
// tiles of kBlockN and kBlockN - kTrim columns, each unit saying where its tile starts. Traits
// without the member (block-scaled, sparse, MoE) are even.
template <class T, class = void>
struct UnevenColumns : std::false_type {};
template <class T>
struct UnevenColumns<T, std::void_t<decltype(T::kUneven)>> : std::bool_constant<T::kUneven> {};

// The first output column of unit w's tile (and the first B row its box loads).
template <class T>
__host__ __device__ __forceinline__ int tile_col0(const gemm::WorkUnit& w) {
  if constexpr (UnevenColumns<T>::value) return w.col0;
  else return w.n_block * T::kBlockN;
}

}  // namespace lowbit::gemm
