// FP8 GEMM configuration choice: a small cost model over the compiled variants and split-K
// factors. Internal; the public entry points are in lowbit/gemm.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gemm/core/tile_scheduler.cuh"
#include "gemm/fp8/variants.h"
#include "gemm/launch_common.h"
#include "lowbit/device.h"
#include "lowbit/gemm.h"

namespace lowbit::fp8 {

struct Fp8Candidate {
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
struct Fp8RoundLatency {
  double round_us;
  double split_us;
  double cta_stream_gbs;
  double kb_floor_us;
  double dram_tbs;
  double norm;
  int64_t max_k;
};
// The per-tensor kernels' (fp8/config.cpp says what it was fitted to).
extern const Fp8RoundLatency kFp8RoundLatency;

// What a family that runs on the core changes in the scoring (the defaults score the plain FP8
// GEMM's compiled kernels).
struct Fp8ScoreOptions {
  // What one CTA of a 64-row tile streams at most, where the family's mainloop streams slower
  // there than the plain GEMM's (0: the plain GEMM's rate, model::kSmStreamGBs).
  double short_tile_stream_gbs = 0.0;
  // The family's own compiled tiles (null: kFp8Variants).
  const Fp8Variant* tiles = nullptr;
  int num_tiles = 0;
  // Per tile of `tiles` (null: none): the most splits its kernels reduce within a cluster
  // (gemm::split_k_cluster_reduce) instead of through the workspace. Such a split costs
  // `cluster_fixup_us` instead of the workspace's fix-up, moves no partials through DRAM, and its
  // clusters fill `capacity.ctas[splits]` CTAs a wave (0: the SMs, rounded down to whole clusters).
  const int* cluster_splits = nullptr;
  double cluster_fixup_us = 0.0;
  gemm::ClusterCapacity capacity;
  // The fraction of the nominal tensor rate each tile class sustains in the family's kernels, by
  // (working rows, block_n, promote_every) (null: the per-tensor kernels', model::tile_efficiency).
  double (*tile_efficiency)(int block_m, int block_n, int promote_every) = nullptr;
  // Candidates that split only the last wave (Fp8GemmConfig::head_cols), which fp8_gemm's launch
  // runs; a family whose launch does not sets false.
  bool heads = true;
  // Whether the family compiles a stream-K kernel for a tile (Fp8GemmConfig::stream_k; null: the
  // per-tensor kernels', gemm/fp8/variants.def).
  bool (*stream_k)(int block_m, int block_n, int promote_every) = nullptr;
  // Two to four tile rows (128 < M <= 384): the unsplit tile that fills one wave with the fewest
  // bytes per CTA goes first (128-row tiles only past M = 256); at three 64-row rows (M <= 192),
  // 64 x 112 at four waves or more (fp8::few_rows_order; measured on the per-tensor kernels). A
  // family whose kernels were not measured there sets false.
  bool few_rows = true;
  // Where the model splits K for one round of narrow tiles at M <= 128, the split taken back as far
  // as this family's measured latency says (fp8::order_one_round_small_m; null: the model's order).
  const Fp8RoundLatency* small_m = &kFp8RoundLatency;
};

// What the last split of a tile adds when the splits reduce within a cluster (one hop of
// distributed shared memory into rank 0; the workspace's fix-up costs the model 1.5 us). Measured
// against the workspace on the same tiles and splits: 0.4-0.8 us faster at M <= 128, K = 7168
// (docs/perf.md block-scaled v6).
constexpr double kClusterSplitFixupUs = 0.8;

// CTAs resident in clusters of 2 ... 8 for the per-tensor kernels that split within a cluster, on
// `device` (gemm/fp8/launch.cu; 0s where the runtime cannot say).
gemm::ClusterCapacity fp8_cluster_capacity(int device);

// Whether a config's splits reduce within a cluster: split, not refused (cluster_reduce = 0), and a
// kernel for its tile, epilogue and output reduces that many.
bool fp8_in_cluster(const Fp8GemmConfig& c, Fp8EpilogueKind epilogue, OutType out);
// The per-tensor chooser's transport for its pick (scored as before, through the workspace): within
// a cluster where fp8_in_cluster and the clusters fit in one wave with room to spare. Measured on
// the H100 against the workspace on the same tiles and splits: 0.3-2.2 us faster at M <= 128 where
// they fit, slower where pairs filled all 132 SMs (docs/perf.md W1 v17).
bool fp8_cluster_by_default(const Fp8GemmConfig& c, int64_t m, int64_t n, Fp8EpilogueKind epilogue, OutType out,
                            const gemm::ClusterCapacity& capacity);

// Where `cands`' first is a split of at most four of a tile at most 128 wide that makes one wave
// (M <= 128), the candidate of that kind with no more splits and the least `latency` estimate goes
// first (the order breaks ties); elsewhere `cands` stays as it is.
void order_one_round_small_m(std::vector<Fp8Candidate>& cands, int64_t m, int64_t n, int64_t k,
                             const Fp8RoundLatency& latency);

// Every candidate scored for the shape on a device with `sm_count` SMs, best first.
std::vector<Fp8Candidate> score_fp8_candidates(int64_t m, int64_t n, int64_t k, int sm_count,
                                               const Fp8ScoreOptions& options = {});

int fp8_k_blocks(int64_t k);
// The K blocks the schedule counts: K blocks of 128, rounded up, in groups of `promote_every`.
int fp8_promotion_groups(int64_t k, int promote_every);
// The persistent schedule of an M x N output in block_m x block_n tiles (cluster rows of
// `cluster` tiles), k_blocks K blocks split `splits` ways; raster_group 0 = raster_group_for /
// cluster.
// `uneven_grid` > 0: uneven columns (Fp8GemmConfig::uneven; fp8_uneven_tiles_n must be > 0) for
// that many CTAs: tiles_n counts them.
gemm::TileSchedule fp8_schedule(int64_t m, int64_t n, int k_blocks, int block_m, int block_n, int cluster,
                                int splits, int raster_group, int sm_count, int uneven_grid = 0);
// Tiles per row under uneven columns (block_n and block_n - UnevenColumnLayout::kTrim wide,
// covering N exactly) for an M-row output walked by `grid` CTAs: the count c >= ceil(N / block_n)
// with the least work on the busiest CTA, ceil(tiles_m * c / grid) x N / c (the fewest tiles on
// ties); 0 where no count covers N exactly (N not a multiple of kTrim, or between the sums).
int fp8_uneven_tiles_n(int64_t m, int64_t n, int block_m, int block_n, int grid);
// The layout of schedule s's tiles_n tiles a row (s from fp8_schedule with uneven_grid > 0).
gemm::UnevenColumnLayout fp8_uneven_layout(int64_t n, int block_n, const gemm::TileSchedule& s);
int raster_group_for(int sm_count, int block_m, int block_n);
// Output tiles, in 64 bits (M and N up to 2^31 each overflow an int).
int64_t fp8_tiles(int64_t m, int64_t n, int block_m, int block_n);
// Stream-K (Fp8GemmConfig::stream_k): the walk a config's launch takes on a device of `sm_count`
// SMs (its raster band, and its grid where the config's is 0).
gemm::StreamKWalk fp8_stream_k_walk(int64_t m, int64_t n, int64_t k, const Fp8GemmConfig& c, int sm_count);
bool fp8_variant_exists(int block_m, int block_n, int* stages);
// Whether a kernel is compiled for the config with that epilogue and output: a line of
// gemm/fp8/variants.def.
bool fp8_config_compiled(const Fp8GemmConfig& c, Fp8EpilogueKind epilogue, bool out_fp32 = false,
                         bool out_fp16 = false);
// A scored candidate as it can run with this epilogue and output: true if compiled; an
// overlapped epilogue that is not compiled for them (a bias, FP32 out at bn=256) is switched
// off instead (the rest of the config is compiled without it).
bool fp8_usable_config(Fp8GemmConfig* c, Fp8EpilogueKind epilogue, bool out_fp32, bool out_fp16 = false);

// Resident row-broadcast rows (variants.h): the fused kernel with rows [0, P) of the CTA's N block
// in shared memory. Each CTA must stay on one N block: units walked N block fastest (raster group
// 1) by a grid that is a multiple of the N tiles.
int fp8_resident_tiles_n(int64_t n);
// The kernel can run: a row broadcast of at most kFp8ResidentMaxRows rows, N tiles <= SMs.
bool fp8_resident_applies(int64_t n, int64_t period, int sm_count);
// The chooser takes it for a fused call where it applies and the 128 x 128 tiles fill a wave:
// below that the per-tile gather overlaps little work either way (and K may be split).
bool fp8_resident_by_default(int64_t m, int64_t n, int64_t period, int sm_count);
// Turns `c` into the resident config: bn=128, splits=1, promote=1, group=1, the largest grid
// that is a multiple of the N tiles (or `c`'s own grid if it is one).
void fp8_make_resident(Fp8GemmConfig* c, int64_t n, int sm_count);

// CTAs that run `units` units of `unit_k_blocks` K blocks each in the same rounds as one CTA
// per SM, every CTA the same number (0: one per SM is as good; config.cpp says where measured).
int balanced_grid(int units, int sm_count, int unit_k_blocks);

}  // namespace lowbit::fp8
