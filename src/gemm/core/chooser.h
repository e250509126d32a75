// The GEMM core's chooser, for the host: a cost model that scores a family's compiled tiles and
// split-K factors for a shape (score_candidates), the persistent schedule a config walks, and the
// grid and raster rules the launchers share. Its rates were fitted on the per-tensor FP8 kernels;
// a family passes its own compiled tiles and whatever its kernels measured otherwise
// (ScoreOptions). The FP8 family's defaults: gemm/fp8/config.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gemm/core/tile_scheduler.cuh"
#include "gemm/launch_common.h"
#include "lowbit/gemm.h"

namespace lowbit::gemm {

// A compiled tile as the chooser scores it (a family lists its own: kFp8Variants, the
// block-scaled dense tiles).
struct TileSpec {
  int block_n;
  int stages;        // plain epilogue (alpha, bias)
  int fused_stages;  // fused epilogue: fewer, to make room for the staged row-broadcast rows; 0 = none
  // Also compiled promoting every two K blocks (plain epilogue without a bias): half the
  // promotion adds and waits, 1.65x cuBLASLt's FP32-out error (docs/perf.md W1 v5).
  bool promote2;
  const char* note;
  // Rows of a tile: 128 (two consumer warpgroups), or 64 (one): twice the tiles along M, so a
  // small-M shape fills the SMs without splitting K, and a stage is half the bytes, so the ring
  // is twice as deep (docs/perf.md W1 v7).
  int block_m = 128;
};

struct Candidate {
  Fp8GemmConfig config;
  int units = 0;
  double waves = 0.0;
  double t_compute_us = 0.0;  // waves x per-unit tensor time
  double t_memory_us = 0.0;   // DRAM bytes / bandwidth, round by round (+ the split-K fix-up)
  double t_stream_us = 0.0;   // rounds x what one CTA streams / the per-SM stream rate
  double t_total_us = 0.0;
  const char* bound = "";
};

// What one round of narrow tiles (at most 128 wide, one wave) takes at M <= 128, launch to store, as
// a family's kernels measured it (docs/perf.md W1 v31): a latency per round, what a split adds to it,
// each CTA's stream of its work rows and B rows per K block (at least `kb_floor_us` a K block: the
// narrowest tiles' K loop), and DRAM for the whole problem, the two rates combined as a `norm`-norm
// (near where they meet both bind). Past `max_k` (0: none) the model's order stands.
// `past_one_round`: the rule also takes back a first choice whose split units need more than one
// round (waves > 1) for the best unsplit one-round candidate, where the family measured that such
// splits lose (the block-scaled family's, docs/perf.md block-scaled "Splits past one round").
struct RoundLatency {
  double round_us;
  double split_us;
  double cta_stream_gbs;
  double kb_floor_us;
  double dram_tbs;
  double norm;
  int64_t max_k;
  bool past_one_round = false;
};

// What a family that runs on the core gives the scoring: its compiled tiles, and what its kernels
// measured where they differ from the per-tensor kernels the model was fitted on (the FP8
// family's: fp8::fp8_score_options).
struct ScoreOptions {
  // What one CTA of a 64-row tile streams at most, where the family's mainloop streams slower
  // there than the plain GEMM's (0: the plain GEMM's rate, model::kSmStreamGBs).
  double short_tile_stream_gbs = 0.0;
  // The family's compiled tiles (null: none, no candidate).
  const TileSpec* tiles = nullptr;
  int num_tiles = 0;
  // Per tile of `tiles` (null: none): the most splits its kernels reduce within a cluster
  // (split_k_cluster_reduce) instead of through the workspace. Such a split costs
  // `cluster_fixup_us` instead of the workspace's fix-up, moves no partials through DRAM, and its
  // clusters fill `capacity.ctas[splits]` CTAs a wave (0: the SMs, rounded down to whole clusters).
  const int* cluster_splits = nullptr;
  double cluster_fixup_us = 0.0;
  ClusterCapacity capacity;
  // The fraction of the nominal tensor rate each tile class sustains in the family's kernels, by
  // (working rows, block_n, promote_every) (null: the per-tensor kernels', model::tile_efficiency).
  double (*tile_efficiency)(int block_m, int block_n, int promote_every) = nullptr;
  // Candidates that split only the last wave (Fp8GemmConfig::head_cols), which fp8_gemm's launch
  // runs; a family whose launch does not sets false.
  bool heads = true;
  // Whether the family compiles a stream-K kernel for a tile (Fp8GemmConfig::stream_k; null:
  // none).
  bool (*stream_k)(int block_m, int block_n, int promote_every) = nullptr;
  // Two to four tile rows (128 < M <= 384): the unsplit tile that fills one wave with the fewest
  // bytes per CTA goes first (128-row tiles only past M = 256); at three 64-row rows (M <= 192),
  // 64 x 112 at four waves or more (few_rows_order; measured on the per-tensor kernels). A
  // family whose kernels were not measured there sets false.
  bool few_rows = true;
  // Where the model splits K for one round of narrow tiles at M <= 128, the split taken back as far
  // as this family's measured latency says (order_one_round_small_m; null: the model's order).
  const RoundLatency* small_m = nullptr;
};

// What the last split of a tile adds when the splits reduce within a cluster (one hop of
// distributed shared memory into rank 0; the workspace's fix-up costs the model 1.5 us). Measured
// against the workspace on the same tiles and splits: 0.4-0.8 us faster at M <= 128, K = 7168
// (docs/perf.md block-scaled v6).
constexpr double kClusterSplitFixupUs = 0.8;

// Where `cands`' first is a split of at most four of a tile at most 128 wide that makes one wave
// (M <= 128), the candidate of that kind with no more splits and the least `latency` estimate goes
// first (the order breaks ties); elsewhere `cands` stays as it is.
void order_one_round_small_m(std::vector<Candidate>& cands, int64_t m, int64_t n, int64_t k,
                             const RoundLatency& latency);

// Every candidate scored for the shape on a device with `sm_count` SMs, best first.
std::vector<Candidate> score_candidates(int64_t m, int64_t n, int64_t k, int sm_count, const ScoreOptions& options);

int k_blocks(int64_t k);
// The K blocks the schedule counts: K blocks of 128, rounded up, in groups of `promote_every`.
int promotion_groups(int64_t k, int promote_every);
// The persistent schedule of an M x N output in block_m x block_n tiles (cluster rows of
// `cluster` tiles), k_blocks K blocks split `splits` ways; raster_group 0 = raster_group_for /
// cluster.
// `uneven_grid` > 0: uneven columns (Fp8GemmConfig::uneven; uneven_tiles_n must be > 0) for
// that many CTAs: tiles_n counts them.
TileSchedule tile_schedule(int64_t m, int64_t n, int k_blocks, int block_m, int block_n, int cluster, int splits,
                           int raster_group, int sm_count, int uneven_grid = 0);
// Tiles per row under uneven columns (block_n and block_n - UnevenColumnLayout::kTrim wide,
// covering N exactly) for an M-row output walked by `grid` CTAs: the count c >= ceil(N / block_n)
// with the least work on the busiest CTA, ceil(tiles_m * c / grid) x N / c (the fewest tiles on
// ties); 0 where no count covers N exactly (N not a multiple of kTrim, or between the sums).
int uneven_tiles_n(int64_t m, int64_t n, int block_m, int block_n, int grid);
// The layout of schedule s's tiles_n tiles a row (s from tile_schedule with uneven_grid > 0).
UnevenColumnLayout uneven_layout(int64_t n, int block_n, const TileSchedule& s);
int raster_group_for(int sm_count, int block_m, int block_n);
// Output tiles, in 64 bits (M and N up to 2^31 each overflow an int).
int64_t tile_count(int64_t m, int64_t n, int block_m, int block_n);

// Stream-K (Fp8GemmConfig::stream_k): the walk a config's launch takes on a device of `sm_count`
// SMs (its raster band, and its grid where the config's is 0).
StreamKWalk stream_k_walk(int64_t m, int64_t n, int64_t k, const Fp8GemmConfig& c, int sm_count);

// CTAs that run `units` units of `unit_k_blocks` K blocks each in the same rounds as one CTA
// per SM, every CTA the same number (0: one per SM is as good; chooser.cpp says where measured).
int balanced_grid(int units, int sm_count, int unit_k_blocks);

}  // namespace lowbit::gemm
