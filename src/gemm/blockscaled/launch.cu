// Host side of the block-scaled FP8 GEMM (dense and grouped): argument checks, tensor maps,
// launches. Stream-ordered; no allocation and no synchronization (except in
// fp8_grouped_check_status, which exists to synchronize).
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

#include "common/choice_cache.h"
#include "common/device_cache.h"
#include "common/key_value.h"
#include "common/ok_once.h"
#include "gemm/blockscaled/blockscaled_variants_gen.h"
#include "gemm/blockscaled/core_traits.cuh"
#include "gemm/blockscaled/grouped_prepare.cuh"
#include "gemm/blockscaled/grouped_workspace.h"
#include "gemm/core/chooser.h"
#include "gemm/launch_common.h"
#include "hopper/cluster_launch.h"
#include "hopper/tensor_map.h"
#include "lowbit/blockscaled.h"
#include "lowbit/device.h"

namespace lowbit {
namespace {

Status check_config(const char* who, const BlockScaledConfig& c) {
  if (c.grid < 0) return Status::Invalid(std::string(who) + ": grid must be >= 0 (0 = SM count)");
  if (c.raster_group < 1 || c.raster_group > gemm::kMaxRasterGroup)
    return Status::Invalid(std::string(who) + ": raster_group must be in [1, " + std::to_string(gemm::kMaxRasterGroup) + "]");
  // CTA pairs (B multicast) ran level with single CTAs on the grouped sets and 8% slower dense
  // (docs/perf.md block-scaled, "pairs level with single CTAs on the grouped sets"); the core runs
  // the block-scaled kernels single.
  if (c.cluster < 0 || c.cluster > 1)
    return Status::Invalid(std::string(who) + ": cluster must be 0 (auto) or 1: the block-scaled kernels run single CTAs");
  if (c.block_n != 0 && !blockscaled::bs_width_compiled(c.block_n))
    return Status::Invalid(std::string(who) + ": block_n must be 0 (auto) or a compiled width:" +
                           blockscaled::bs_widths_text() + " (got " + std::to_string(c.block_n) + ")");
  if (c.block_m != 0 && c.block_m != 64 && c.block_m != 128)
    return Status::Invalid(std::string(who) + ": block_m must be 0 (auto), 64 or 128 (dense; got " +
                           std::to_string(c.block_m) + ")");
  if (c.splits < 0) return Status::Invalid(std::string(who) + ": splits must be >= 0 (0 = auto)");
  if (c.overlap < -1 || c.overlap > 1) return Status::Invalid(std::string(who) + ": overlap must be -1 (auto), 0 or 1");
  if (c.cluster_reduce < -1 || c.cluster_reduce > 1)
    return Status::Invalid(std::string(who) + ": creduce must be -1 (auto), 0 or 1");
  return Status::Ok();
}

// ---- dense: the GEMM core with the block-scaled operand and promotion policies -----------------

// What one block-scaled CTA of the 64-row tile streams at most (the core's model,
// gemm/core/chooser.cpp, takes 75 GB/s for the plain mainloop): its lone consumer warpgroup scales
// every K block with no other MMAs to cover it. Measured at 64 x 4096 x 7168, unsplit 64 x 64 tiles
// on 64 SMs: 917 KB per CTA in 17.3-19.0 us, 48-53 GB/s; at the plain rate the chooser left half
// the SMs idle where splitting K ran 1.13-1.2x faster (docs/perf.md block-scaled v5).
constexpr double kStreamGBs = 50.0;

// The compiled dense tiles (variants.def, once per tile) for the core's scorer, with the most
// splits each reduces within a cluster for an output type: the model's tiles, or (`wave_only`)
// those the chooser takes only where they fill one wave.
struct DenseTiles {
  gemm::TileSpec v[blockscaled::kNumBsVariantSpecs];
  int cluster_splits[blockscaled::kNumBsVariantSpecs] = {};
  int n = 0;
  DenseTiles(OutType out, bool wave_only) {
    for (const auto& s : blockscaled::kBsVariantSpecs) {
      if (s.problems != blockscaled::BsProblems::kDense || s.wave_only != wave_only) continue;
      bool seen = false;
      for (int i = 0; i < n; ++i) seen = seen || (v[i].block_m == s.block_m && v[i].block_n == s.block_n);
      if (seen) continue;
      cluster_splits[n] = blockscaled::bs_cluster_splits(s.block_m, s.block_n, out);
      v[n++] = gemm::TileSpec{s.block_n,
                               blockscaled::core_stages(s.block_m, s.block_n,
                                                        blockscaled::core_epi_slots(s.block_m, s.block_n, s.overlap, s.problems),
                                                        0, blockscaled::a_scale_group(s.block_m, s.block_n, s.problems)),
                               0, false, s.reason, s.block_m};
    }
  }
};

using gemm::ClusterCapacity;
ClusterCapacity cluster_capacity(int device) {
  return gemm::cluster_capacity(blockscaled::kBsVariantSpecs, blockscaled::kBsVariantLaunchers,
                                blockscaled::kNumBsVariantSpecs, device);
}

// One round of narrow tiles at M <= 128 where the model splits K (gemm::order_one_round_small_m),
// fitted to 600 times of this family's 64 x 32, 64 x 48, 64 x 64, 64 x 80 and 128 x 64 tiles,
// unsplit and split, at M = 16, 64 and 128, N = 1536-5120, K = 1536-8192 (RMS error 5.8%; docs/perf.md
// block-scaled v19): the per-tensor form, with each CTA's stream at 92 GB/s (0.18 us per K block at
// 64 x 64, against the per-tensor kernels' 0.12: the 64-row pace of issue 39) and no K block under
// 0.14 us (64 x 32's K loop: without the floor it took 64 x 32 at 128 x 2048 x 5120, where v18
// measured it up to 5% slower than the split). Up to K = 8192, the fit's range: held out (v19)
// the 73 picks it changed there ran 1.13x (1.008-1.34x); past it 10 ran 0.88-1.19x.
// Past one round (RoundLatency::past_one_round): the model split 64 x 64 three ways in clusters
// where N left every 64-row tile under 80% of a wave (68-76 unsplit units), so its 204-228 units
// needed two rounds of clusters; the unsplit tile ran 1.05-1.18x faster at all 12 such shapes of a
// sweep outside the suites (M = 16, 64; N = 4352, 4864; K = 3072-6144; docs/perf.md block-scaled
// "Splits past one round").
const gemm::RoundLatency kBsRoundLatency{2.40, 1.43, 92.45, 0.1407, 3.06, 2.31, 8192, /*past_one_round=*/true};

// One measured exception to the model's order: unsplit tiles of 64 working rows whose units fill
// 80 to 100% of one wave go ahead of the split ones. At K <= 8192 every candidate there is
// DRAM-bound at the same bytes plus a launch's fill (docs/perf.md block-scaled v16: the best tile at
// 16 such shapes runs 2.95 us + bytes / 2.95 TB/s); the model's nominal DRAM rate and per-CTA stream
// put a split ahead, and its fix-up made it slower:
//  - two 64-row tile rows (64 < M <= 128), 64-row tiles 48 to 80 wide, and 32 wide up to K = 4096:
//    the split 128 x 64 tile ran 3-12% slower than 64 x 64 (block-scaled v12). 48 and 80 fill the
//    wave where 64 does not, with 1.6x or more of the unsplit 128 x 64 tile's CTAs, and ran 3-24%
//    faster than it (N = 3072, 4608, 5120; v17); 96 and 112 wide, with 1.33x and 1.14x, ran 1-4%
//    slower and are not compiled. 32 wide (N = 1792-2112), against the model's 64 x 64 split in
//    two, ran 8-29% faster at K <= 3072 and -1 to +10% at 4096, but 1-8% slower from K = 5120 on
//    at M = 128, where its slower K loop outweighs the split's fix-up (v18, the two-row sweep; 9%
//    slower at 128 x 2112 x 7168 already in v12);
//  - one tile row (M <= 64), tiles at most 64 wide, of 64 or 128 rows (a 128-row tile loads an A
//    box of at most M rows and runs one consumer warpgroup, as the 64-row tile does): at N x K =
//    4096 x 7168 the 64 x 32 tile (128 units) ran 4-7% faster than the split 128 x 64 pick at M = 1
//    to 64 (v16).
// Past K = 8192 the rule holds only where the model's own first choice leaves its last wave under
// 80% full (`model_last_wave`): there the one wave ran 14-16% faster (64 x 80 against 128 x 128 split
// in two, 68-80 units; 64 x 48 against 64 x 80 split in three, 231 units), and where the model's
// split filled a wave (128 x 64 in two, 128 units) it ran level or up to 6% faster than the one wave
// (v17, "past K = 8192"; before v17, -7 to +3% at K = 14336 and 18944).
bool full_wave_of_short_tiles(int64_t m, int64_t n, int64_t k, int sms, const Fp8GemmConfig& c,
                              double model_last_wave) {
  if (c.splits != 1 || m > 128 || (k > 8192 && model_last_wave >= 0.8)) return false;
  if (m > 64) {
    const bool width = (c.block_n >= 48 && c.block_n <= 80) || (c.block_n == 32 && k <= 4096);
    if (c.block_m != 64 || !width) return false;
  } else if (c.block_n > 64) {
    return false;
  }
  const int64_t units = (m + c.block_m - 1) / c.block_m * ((n + c.block_n - 1) / c.block_n);
  return units <= sms && 10 * units >= 8 * static_cast<int64_t>(sms);
}
// The tensor rate per tile class that the block-scaled picks were tuned with (block-scaled v4-v18
// against DeepGEMM): the per-tensor kernels' rates before W1 v21. The block-scaled kernels promote
// every K block with two scales and have their own K loop; their classes were not re-measured.
double bs_tile_efficiency(int block_m, int block_n, int /*promote_every*/) {
  if (block_m == 64) return 0.40;
  return block_n == 64 ? 0.50 : 0.80;
}
// The model's candidates over the MODEL tiles, or the WAVE tiles (variants.def).
std::vector<gemm::Candidate> score_tiles(int64_t m, int64_t n, int64_t k, int sms, OutType out,
                                         const ClusterCapacity& capacity, bool wave_only) {
  static const DenseTiles bf16(OutType::kBF16, false), fp32(OutType::kFP32, false);
  static const DenseTiles bf16_wave(OutType::kBF16, true), fp32_wave(OutType::kFP32, true);
  const DenseTiles& tiles = out == OutType::kFP32 ? (wave_only ? fp32_wave : fp32) : (wave_only ? bf16_wave : bf16);
  if (tiles.n == 0) return {};
  gemm::ScoreOptions o;
  o.short_tile_stream_gbs = kStreamGBs;
  o.tiles = tiles.v;
  o.num_tiles = tiles.n;
  o.cluster_splits = tiles.cluster_splits;
  o.cluster_fixup_us = gemm::kClusterSplitFixupUs;
  o.capacity = capacity;
  o.tile_efficiency = bs_tile_efficiency;
  o.heads = false;
  o.few_rows = false;  // measured on the per-tensor kernels only (W1 v26, v28, v29)
  o.small_m = nullptr;  // score_dense applies the family's own (kBsRoundLatency), after its rule
  o.stream_k = [](int, int, int) { return false; };  // no block-scaled stream-K kernel
  return gemm::score_candidates(m, n, k, sms, o);
}
// What the last wave of the model's first choice that the call can run (`runs`: its split-K
// workspace, its kernel) fills, in the model's own waves (a cluster split's waves count the CTAs
// that fit in clusters); 1 for whole waves or none.
template <class Runs>
double first_last_wave(const std::vector<gemm::Candidate>& cands, const Runs& runs) {
  for (const auto& c : cands) {
    if (!runs(c.config)) continue;
    const double part = c.waves - std::floor(c.waves);
    return part == 0.0 ? 1.0 : part;
  }
  return 1.0;
}
template <class Runs>
std::vector<gemm::Candidate> score_dense(int64_t m, int64_t n, int64_t k, int sms, OutType out,
                                         const ClusterCapacity& capacity, const Runs& runs) {
  std::vector<gemm::Candidate> cands = score_tiles(m, n, k, sms, out, capacity, false);
  const double fill = first_last_wave(cands, runs);
  auto full_wave = [&](const gemm::Candidate& c) { return full_wave_of_short_tiles(m, n, k, sms, c.config, fill); };
  // Ahead of the model's order where it holds (full_wave_of_short_tiles), then the WAVE tiles where
  // it holds for them (nowhere else; the widths fill one wave at different N, so they rarely meet):
  // the call's cached pick and pick_dense (explain, workspace size) both take the first candidate
  // that fits.
  auto first_other = std::stable_partition(cands.begin(), cands.end(), full_wave);
  std::vector<gemm::Candidate> out_cands(cands.begin(), first_other);
  for (const auto& c : score_tiles(m, n, k, sms, out, capacity, true))
    if (full_wave(c)) out_cands.push_back(c);
  out_cands.insert(out_cands.end(), first_other, cands.end());
  gemm::order_one_round_small_m(out_cands, m, n, k, kBsRoundLatency);
  return out_cands;
}

// Whether a dense config reduces its splits within a cluster: split, not refused by `mode`
// (BlockScaledConfig::cluster_reduce), compiled for its tile, output and split count, and -- where
// the device was asked (`capacity`) -- clusters of that size fit on it at all (otherwise the
// workspace transport runs; a forced creduce=1 is still tried).
bool reduces_in_cluster(const Fp8GemmConfig& c, OutType out, int mode = -1, const ClusterCapacity* capacity = nullptr) {
  return c.splits > 1 && mode != 0 && !c.overlap &&
         blockscaled::find_bs_variant(c.block_m, c.block_n, out, false, c.splits) >= 0 &&
         (mode == 1 || !capacity || (c.splits < 9 && capacity->ctas[c.splits] > 0));
}
// The split-K workspace of a block-scaled dense tile: sized from the block-scaled table, not the
// per-tensor one (fp8_gemm_workspace_size is 0 for a tile only this family compiles, 144 or 64 x
// 32, and a split run over that workspace wrote past it: block-scaled v8).
size_t split_workspace(int64_t m, int64_t n, const Fp8GemmConfig& c) {
  if (m <= 0 || n <= 0 || c.splits < 1 || !blockscaled::bs_tile_compiled(c.block_m, c.block_n)) return 0;
  return gemm::split_k_workspace_bytes(static_cast<size_t>(gemm::tile_count(m, n, c.block_m, c.block_n)), c.splits,
                                       c.block_m, c.block_n);
}
// The workspace a dense config needs: none when its splits reduce within a cluster.
size_t dense_workspace(int64_t m, int64_t n, const Fp8GemmConfig& c, OutType out, int mode = -1) {
  return reduces_in_cluster(c, out, mode) ? 0 : split_workspace(m, n, c);
}

// The compiled dense tiles, for error messages.
std::string dense_tiles_text() {
  std::string s;
  for (const auto& v : blockscaled::kBsVariantSpecs)
    if (v.out == OutType::kBF16 && !v.overlap && v.problems == blockscaled::BsProblems::kDense) s += " " + std::to_string(v.block_m) + " x " + std::to_string(v.block_n);
  return s;
}

// The tiles and outputs compiled to reduce split K within a cluster, for error messages.
std::string cluster_tiles() {
  std::string s;
  for (const auto& v : blockscaled::kBsVariantSpecs)
    if (v.cluster_splits > 1)
      s += " bm=" + std::to_string(v.block_m) + ",bn=" + std::to_string(v.block_n) + " up to " +
           std::to_string(v.cluster_splits) + " splits" + (v.out == OutType::kFP32 ? " FP32 out" : " BF16 out");
  return s;
}

// The tiles and outputs compiled with the overlapped epilogue, for error messages.
std::string overlap_tiles() {
  std::string s;
  for (const auto& v : blockscaled::kBsVariantSpecs)
    if (v.overlap && v.problems == blockscaled::BsProblems::kDense)
      s += " bm=" + std::to_string(v.block_m) + ",bn=" + std::to_string(v.block_n) +
           (v.out == OutType::kFP32 ? " FP32 out" : " BF16 out");
  return s;
}

// Whether an unsplit unit's epilogue runs under the next unit's first MMAs: wherever that kernel
// is compiled (variants.def says which and why; docs/perf.md block-scaled v5).
bool overlap_default(const Fp8GemmConfig& c, OutType out) {
  return c.splits == 1 && blockscaled::find_bs_variant(c.block_m, c.block_n, out, true) >= 0;
}

// A core candidate as a block-scaled config, false where no block-scaled kernel runs it: one K
// block per promotion (the scales change every block), single CTAs, no uneven columns; the
// overlapped epilogue where overlap_default says.
bool as_blockscaled(Fp8GemmConfig* c, OutType out) {
  if (c->promote_every != 1 || c->cluster != 1 || !blockscaled::bs_tile_compiled(c->block_m, c->block_n)) return false;
  c->overlap = overlap_default(*c, out);
  c->uneven = false;
  return true;
}

// The core's cost model over the block-scaled kernels (as_blockscaled). `fits` says whether a
// candidate's split-K workspace is available.
template <class Fits>
Status pick_dense(int64_t m, int64_t n, int64_t k, OutType out_type, int sms, const ClusterCapacity& capacity,
                  const Fits& fits, Fp8GemmConfig* out, std::string* why = nullptr) {
  auto runs = [&](Fp8GemmConfig c) { return as_blockscaled(&c, out_type) && fits(c); };
  const double fill = why ? first_last_wave(score_tiles(m, n, k, sms, out_type, capacity, false), runs) : 1.0;
  for (const auto& cand : score_dense(m, n, k, sms, out_type, capacity, runs)) {
    Fp8GemmConfig c = cand.config;
    if (!as_blockscaled(&c, out_type) || !fits(c)) continue;
    if (why) {
      char buf[200];
      if (full_wave_of_short_tiles(m, n, k, sms, cand.config, fill))
        std::snprintf(buf, sizeof(buf),
                      " (one wave of unsplit 64-row tiles, %d units: docs/perf.md block-scaled v12, v16-v18)", cand.units);
      else {
        // With what the one-round rule (gemm::order_one_round_small_m) added where it moved the pick.
        const size_t moved = c.reason.find("; one round");
        const std::string rule = moved == std::string::npos ? std::string() : c.reason.substr(moved);
        std::snprintf(buf, sizeof(buf), " (the core's cost model: %.1f us, %s-bound, %d units%s)", cand.t_total_us,
                      cand.bound, cand.units, rule.c_str());
      }
      *why = buf;
    }
    *out = c;
    return Status::Ok();
  }
  return Status::Invalid("fp8_blockscaled_gemm: no compiled tile for this shape");
}

// A forced dense config over the chooser's pick: its non-zero tile, split and grid fields, and its
// raster group. A forced width with the rows left to the chooser takes rows it is compiled with
// (128 where that tile exists, else 64).
void apply_forced(const BlockScaledConfig& f, OutType out, Fp8GemmConfig* c) {
  if (f.block_m) c->block_m = f.block_m;
  if (f.block_n) c->block_n = f.block_n;
  if (f.block_n && !f.block_m && !blockscaled::bs_tile_compiled(c->block_m, c->block_n))
    c->block_m = blockscaled::bs_tile_compiled(128, c->block_n) ? 128 : 64;
  if (f.splits) c->splits = f.splits;
  if (f.grid) c->grid = f.grid;
  c->raster_group = f.raster_group;
  if (f.overlap >= 0) c->overlap = f.overlap == 1;
  else if (f.block_m || f.block_n || f.splits) c->overlap = overlap_default(*c, out);
}

std::string dense_text(const Fp8GemmConfig& c, bool in_cluster = false) {
  return "bm=" + std::to_string(c.block_m) + ",bn=" + std::to_string(c.block_n) + ",splits=" +
         std::to_string(c.splits) + ",group=" + std::to_string(c.raster_group) + ",grid=" + std::to_string(c.grid) +
         (c.overlap ? ",overlap=1" : "") + (in_cluster ? ",creduce=1" : "");
}

// ---- grouped: the GEMM core walking the groups' tiles (GroupedProblems) ------------------------

// The grouped kernel of a call: the group sizes live on the device, so the host cannot count tiles;
// the widest tile compiled for the output is the default (the grouped GEMM exists for large groups;
// small ones can force bn=128), with the overlapped epilogue wherever it is compiled (variants.def).
struct GroupedChoice {
  int line = -1;
  int block_n = 0;
  bool overlap = false;
};

// The compiled grouped kernels, for error messages.
std::string grouped_tiles_text() {
  std::string s;
  for (const auto& v : blockscaled::kBsVariantSpecs)
    if (v.problems == blockscaled::BsProblems::kGrouped)
      s += " bn=" + std::to_string(v.block_n) + (v.out == OutType::kFP32 ? " FP32" : " BF16") +
           (v.overlap ? " overlap=1" : " overlap=0");
  return s;
}

Status choose_grouped(const char* who, const BlockScaledConfig& c, OutType out, GroupedChoice* g,
                      std::string* why = nullptr) {
  g->block_n = c.block_n;
  if (g->block_n == 0)
    for (const auto& v : blockscaled::kBsVariantSpecs)
      if (v.problems == blockscaled::BsProblems::kGrouped && v.out == out && v.block_n > g->block_n) g->block_n = v.block_n;
  const int with = blockscaled::find_bs_variant(128, g->block_n, out, true, 0, blockscaled::BsProblems::kGrouped);
  const int without = blockscaled::find_bs_variant(128, g->block_n, out, false, 0, blockscaled::BsProblems::kGrouped);
  g->overlap = c.overlap == 1 || (c.overlap == -1 && with >= 0);
  g->line = g->overlap ? with : without;
  if (g->line < 0)
    return Status::Invalid(std::string(who) + ": no grouped kernel bn=" + std::to_string(g->block_n) +
                           (out == OutType::kFP32 ? " FP32" : " BF16") + " overlap=" + (g->overlap ? "1" : "0") +
                           " (compiled:" + grouped_tiles_text() + ")");
  // The reason is built only when asked for (a call asks nothing: no string work per call).
  if (why)
    *why = "bn=" + std::to_string(g->block_n) + (g->overlap ? ",overlap=1" : "") + " (" +
           (c.block_n == 0 ? "grouped: group sizes are on the device; the widest tile by default" : "forced") + ")";
  return Status::Ok();
}

// Templates for the grouped maps, as the core's dense maps (A in boxes of 128 rows, B of the
// tile's columns, D in the epilogue's 64-row chunks of 128 bytes), with the box, swizzle, data type
// and L2 policy set once per output type and tile; the device patches base, sizes and pitch per
// group. Encoded once per process (the base address is a placeholder the device always replaces);
// a failed encoding is not kept.
struct GroupedMaps {
  CUtensorMap a, b, d;
};
Status grouped_templates(OutType out, int block_n, const GroupedMaps** maps) {
  static OkOnce<GroupedMaps> cache[4];
  const int i = (out == OutType::kFP32 ? 1 : 0) + (block_n == 256 ? 2 : 0);
  return cache[i].get(
      [out, block_n](GroupedMaps* m) {
        const void* placeholder = reinterpret_cast<void*>(uintptr_t{1} << 20);
        const bool f32 = out == OutType::kFP32;
        const int ob = f32 ? 4 : 2;
        const hopper::TensorMap2dSpec sa = hopper::dense_2d(placeholder, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, 128, 128, 128, 128);
        const hopper::TensorMap2dSpec sb = hopper::dense_2d(placeholder, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, 256, 128,
                                                            static_cast<uint32_t>(block_n), 128);
        hopper::TensorMap2dSpec sd = hopper::dense_2d(placeholder, f32 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
                                                                       : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                                                      ob, 128, 128, 64, static_cast<uint32_t>(128 / ob));
        sd.swizzle = hopper::TmaSwizzle::k128B;
        sd.l2_promotion = CU_TENSOR_MAP_L2_PROMOTION_NONE;
        static_assert(gemm::epi_chunk_bytes(128, 2) == 128 && gemm::epi_chunk_bytes(128, 4) == 128,
                      "the grouped tiles store 128-byte chunks");
        LOWBIT_RETURN_IF_ERROR(hopper::make_tensor_map_2d(sa, &m->a));
        LOWBIT_RETURN_IF_ERROR(hopper::make_tensor_map_2d(sb, &m->b));
        return hopper::make_tensor_map_2d(sd, &m->d);
      },
      maps);
}

// What a forced config may set for the grouped GEMM.
Status check_grouped_config(const char* who, const BlockScaledConfig& cfg) {
  LOWBIT_RETURN_IF_ERROR(check_config(who, cfg));
  if ((cfg.block_n != 0 && cfg.block_n < 128) || cfg.block_m != 0 || cfg.splits != 0 || cfg.cluster_reduce == 1)
    return Status::Invalid(std::string(who) + ": the grouped GEMM runs 128-row tiles of 128 or 256 columns, unsplit "
                                              "(bn below 128, bm, splits and creduce are the dense GEMM's)");
  return Status::Ok();
}

// The grouped GEMM's two launches on `stream`: the preparation kernel over the groups of
// `source` (descriptors read or built), then the core's persistent kernel over their tiles,
// reading the descriptors at `problems` (the caller's array, or the ones the preparation kernel
// wrote).
template <class Source>
Status launch_grouped(const char* who, const Source& source, const Fp8GroupedProblem* problems, int groups,
                      OutType out_type, const blockscaled::GroupedWorkspace& ws, const BlockScaledConfig& cfg,
                      const DeviceInfo& dev, cudaStream_t stream) {
  GroupedChoice g;
  LOWBIT_RETURN_IF_ERROR(choose_grouped(who, cfg, out_type, &g));
  const blockscaled::VariantLauncher& entry = blockscaled::kBsVariantLaunchers[g.line]();
  if (static_cast<size_t>(entry.smem_bytes) > dev.smem_per_block_optin)
    return Status::Error(StatusCode::kUnsupportedDevice, std::string(who) + ": kernel needs " +
                                                             std::to_string(entry.smem_bytes) +
                                                             " bytes of shared memory per block; the device allows " +
                                                             std::to_string(dev.smem_per_block_optin));
  const GroupedMaps* tmpl = nullptr;
  LOWBIT_RETURN_IF_ERROR(grouped_templates(out_type, g.block_n, &tmpl));
  const int out_bytes = out_type == OutType::kFP32 ? 4 : 2;
  cudaError_t e = hopper::launch_kernel(blockscaled::grouped_prepare_kernel<Source>, dim3(1),
                                        dim3(blockscaled::kPrepareThreads), 0, stream, /*pdl=*/false, source, groups, ws,
                                        out_bytes, /*cluster_m=*/1, g.block_n, tmpl->a, tmpl->b, tmpl->d);
  if (e != cudaSuccess) return gemm::cuda_error(std::string(who) + " prepare launch", e);

  gemm::KernelParams p{};
  p.sched.splits = 1;
  p.sched.group_m = cfg.raster_group;
  // No one problem: the store clips to each group's rows (GroupedProblems), never to these.
  p.set_problem(INT32_MAX, INT32_MAX, 0, 128, 1.0f, nullptr, nullptr);
  p.epi.row_period = 1;
  p.groups = {problems, groups, ws.tile_start, ws.maps};
  // The unit count is known only on the device: every CTA that fits, idle ones exit at once.
  int launched = 0;
  e = entry.launch(cfg.grid, 0, stream, tmpl->a, tmpl->b, tmpl->d, tmpl->d, tmpl->a, p, dev.device, &launched);
  const auto describe = [&] {
    return std::string(who) + " bn=" + std::to_string(g.block_n) + (g.overlap ? ",overlap" : "");
  };
  return gemm::launch_status(e, describe, launched, -1);
}

}  // namespace

std::string BlockScaledConfig::to_string() const {
  return "grid=" + std::to_string(grid) + ",group=" + std::to_string(raster_group) + ",cluster=" +
         std::to_string(cluster) + ",bn=" + std::to_string(block_n) + ",bm=" + std::to_string(block_m) +
         ",splits=" + std::to_string(splits) + ",overlap=" + std::to_string(overlap) +
         ",creduce=" + std::to_string(cluster_reduce);
}

std::string explain_blockscaled_choice(const BlockScaledConfig& config, bool grouped, int64_t m, int64_t n,
                                      int sm_count, int64_t k) {
  std::string why;
  if (grouped) {
    GroupedChoice g;
    const Status st = choose_grouped("grouped", config, OutType::kBF16, &g, &why);
    return st.ok() ? why : st.message();
  }
  if (m < 1 || n < 16 || k < 16) return "dense: needs M >= 1 and N, K >= 16";
  Fp8GemmConfig c;
  int device = 0;
  const bool have_device = cudaGetDevice(&device) == cudaSuccess;
  const ClusterCapacity capacity = have_device ? cluster_capacity(device) : ClusterCapacity{};
  cudaGetLastError();
  const Status st = pick_dense(m, n, k, OutType::kBF16, sm_count > 0 ? sm_count : 1, capacity,
                               [](const Fp8GemmConfig&) { return true; }, &c, &why);
  if (!st.ok()) return st.message();
  const bool forced = config.block_m || config.block_n || config.splits || config.grid || config.raster_group != 8 ||
                      config.overlap >= 0 || config.cluster_reduce >= 0;
  if (forced) {
    apply_forced(config, OutType::kBF16, &c);
    why = " (forced)";
  }
  return dense_text(c, reduces_in_cluster(c, OutType::kBF16, config.cluster_reduce, have_device ? &capacity : nullptr)) +
         why;
}

Status parse_blockscaled_config(const std::string& text, BlockScaledConfig* out) {
  if (!out) return Status::Invalid("parse_blockscaled_config: out must be non-null");
  BlockScaledConfig c;
  LOWBIT_RETURN_IF_ERROR(parse_int_items(text, [&c](const std::string& key, int value) {
    if (key == "grid") c.grid = value;
    else if (key == "group") c.raster_group = value;
    else if (key == "cluster") c.cluster = value;
    else if (key == "bn") c.block_n = value;
    else if (key == "bm") c.block_m = value;
    else if (key == "splits") c.splits = value;
    else if (key == "overlap") c.overlap = value;
    else if (key == "creduce") c.cluster_reduce = value;
    else return Status::Invalid("unknown block-scaled config key '" + key +
                                "' (grid, group, cluster, bn, bm, splits, overlap, creduce)");
    return Status::Ok();
  }));
  LOWBIT_RETURN_IF_ERROR(check_config("parse_blockscaled_config", c));
  *out = c;
  return Status::Ok();
}

namespace {

// The dense config of a call: the chooser's pick (memoized per device, shape, output and
// workspace), then a forced config's fields; checked against what is compiled and the workspace.
Status dense_config(const Fp8BlockScaledArgs& x, const BlockScaledConfig* forced, const DeviceInfo& dev,
                    Fp8GemmConfig* out) {
  static ChoiceCache<6, Fp8GemmConfig> chosen;
  const ChoiceKey<6> key{{dev.device, x.m, x.n, x.k, static_cast<int64_t>(x.out_type), check::extent_of(x.workspace_bytes)}};
  // The chooser's pick says which split-K transport it runs (cluster_reduce 0 or 1). The device
  // is asked for its cluster capacity on a miss only (and for a forced config).
  Fp8GemmConfig c;
  ClusterCapacity capacity;
  bool have_capacity = false;
  auto device_capacity = [&]() -> const ClusterCapacity& {
    if (!have_capacity) capacity = cluster_capacity(dev.device);
    have_capacity = true;
    return capacity;
  };
  auto fits = [&](Fp8GemmConfig* cand) {
    if (!as_blockscaled(cand, x.out_type)) return false;
    cand->cluster_reduce = reduces_in_cluster(*cand, x.out_type, -1, &device_capacity()) ? 1 : 0;
    return dense_workspace(x.m, x.n, *cand, x.out_type, cand->cluster_reduce) <= x.workspace_bytes;
  };
  LOWBIT_RETURN_IF_ERROR(chosen.pick(
      key, &c,
      [&] {
        return score_dense(x.m, x.n, x.k, dev.sm_count, x.out_type, device_capacity(),
                           [&](Fp8GemmConfig cand) { return fits(&cand); });
      },
      fits, "fp8_blockscaled_gemm: no compiled tile for this shape"));
  if (forced) {
    apply_forced(*forced, x.out_type, &c);
    if (!blockscaled::bs_tile_compiled(c.block_m, c.block_n))
      return Status::Invalid("fp8_blockscaled_gemm: no dense tile bm=" + std::to_string(c.block_m) + ", bn=" +
                             std::to_string(c.block_n) + " (compiled:" + dense_tiles_text() + ")");
    const int kb = gemm::k_blocks(x.k);
    if (c.splits < 1 || c.splits > kb)
      return Status::Invalid("fp8_blockscaled_gemm: splits must be in [1, " + std::to_string(kb) + "] (K blocks)");
    LOWBIT_RETURN_IF_ERROR(
        gemm::check_split_tiles("fp8_blockscaled_gemm", gemm::tile_count(x.m, x.n, c.block_m, c.block_n), c.splits));
    if (c.overlap && (c.splits != 1 || blockscaled::find_bs_variant(c.block_m, c.block_n, x.out_type, true) < 0))
      return Status::Invalid("fp8_blockscaled_gemm: overlap=1 needs splits=1 and a tile compiled with it (" +
                             dense_text(c) + "; compiled:" + overlap_tiles() + ")");
    if (forced->cluster_reduce == 1 && !reduces_in_cluster(c, x.out_type, 1))
      return Status::Invalid("fp8_blockscaled_gemm: creduce=1 needs splits > 1 on a tile compiled to reduce that many "
                             "within a cluster (" + dense_text(c) + "; compiled:" + cluster_tiles() + ")");
    c.cluster_reduce = reduces_in_cluster(c, x.out_type, forced->cluster_reduce, &device_capacity()) ? 1 : 0;
    const size_t need = dense_workspace(x.m, x.n, c, x.out_type, c.cluster_reduce);
    if (need > x.workspace_bytes)
      return Status::Error(StatusCode::kWorkspaceTooSmall, "fp8_blockscaled_gemm: " + dense_text(c) + " needs " +
                                                               std::to_string(need) + " bytes of workspace, got " +
                                                               std::to_string(x.workspace_bytes));
  }
  *out = c;
  return Status::Ok();
}

}  // namespace

size_t fp8_blockscaled_workspace_size(int64_t m, int64_t n, int64_t k, const BlockScaledConfig* config) {
  check::ArgCheck shape("fp8_blockscaled_workspace_size");
  if (!gemm::gemm_shape(shape, m, n, k, 16).ok()) return 0;
  Fp8GemmConfig c;
  if (config && config->splits > 0) {
    // Forced splits: the most any compiled tile the config allows would need (the tile is the
    // chooser's where the config leaves it open), so the answer never under-reports.
    size_t most = 0;
    for (const auto& v : blockscaled::kBsVariantSpecs) {
      if (v.problems != blockscaled::BsProblems::kDense) continue;
      if ((config->block_m && v.block_m != config->block_m) || (config->block_n && v.block_n != config->block_n))
        continue;
      c.block_m = v.block_m;
      c.block_n = v.block_n;
      c.splits = config->splits;
      most = std::max(most, split_workspace(m, n, c));
    }
    return most;
  }
  const DeviceInfo* dev = nullptr;
  if (!current_device(&dev).ok()) return 0;
  size_t most = 0;
  // The chooser takes the best candidate that fits: the first compiled one needs the most. Either
  // output: a split BF16 reduces within a cluster (no workspace) may go through it in FP32.
  const ClusterCapacity capacity = cluster_capacity(dev->device);
  for (const OutType out : {OutType::kBF16, OutType::kFP32})
    if (pick_dense(m, n, k, out, dev->sm_count, capacity, [](const Fp8GemmConfig&) { return true; }, &c).ok()) {
      if (config) apply_forced(*config, out, &c);
      most = std::max(most, dense_workspace(m, n, c, out, config ? config->cluster_reduce : -1));
    }
  return most;
}

Status fp8_blockscaled_gemm(const Fp8BlockScaledArgs& x, cudaStream_t stream, const BlockScaledConfig* forced) {
  using check::extent;
  using check::Null;
  const char* who = "fp8_blockscaled_gemm";
  check::ArgCheck c(who);
  gemm::gemm_shape(c, x.m, x.n, x.k, 16)
      .ptr("A", x.a, 16, Null::kRefused, extent(x.m, x.k))
      .ptr("B", x.b, 16, Null::kRefused, extent(x.n, x.k))
      .out("D", x.d, 16, extent(x.m, x.n, x.out_type == OutType::kFP32 ? 4 : 2))
      // The last K block's row ends after M scales, not sfa_ld.
      .ptr("sfa", x.sfa, 16, Null::kRefused,
           check::extent(4, check::extent_add(check::extent(check::ceil_div(x.k, 128) - 1, x.sfa_ld), x.m)))
      .ptr("sfb", x.sfb, 4, Null::kRefused, extent(check::ceil_div(x.n, 128), check::ceil_div(x.k, 128), 4))
      .rule(x.sfa_ld < x.m || x.sfa_ld % 4 != 0,
            [&] { return "sfa_ld must be >= M and a multiple of 4 (got " + std::to_string(x.sfa_ld) + ")"; })
      .rule(x.out_type != OutType::kBF16 && x.out_type != OutType::kFP32,
            [] { return std::string("out_type must be BF16 or FP32 (FP16 is fp8_gemm's alone)"); })
      .rule(x.workspace_bytes > 0 && !x.workspace, [] { return std::string("workspace_bytes > 0 with a null workspace"); })
      .out("workspace", x.workspace, 16, check::extent_of(x.workspace_bytes), Null::kAllowed);
  LOWBIT_RETURN_IF_ERROR(c.status());
  if (forced) LOWBIT_RETURN_IF_ERROR(check_config(who, *forced));
  const DeviceInfo* devp = nullptr;
  LOWBIT_RETURN_IF_ERROR(c.device(&devp));
  const DeviceInfo& dev = *devp;
  Fp8GemmConfig cfg;
  LOWBIT_RETURN_IF_ERROR(dense_config(x, forced, dev, &cfg));
  const bool f32 = x.out_type == OutType::kFP32;
  const bool in_cluster = cfg.splits > 1 && cfg.cluster_reduce == 1;
  const int line = blockscaled::find_bs_variant(cfg.block_m, cfg.block_n, x.out_type, cfg.overlap,
                                                in_cluster ? cfg.splits : 0);
  if (line < 0) return Status::Invalid(std::string(who) + ": no kernel for " + dense_text(cfg, in_cluster));
  const blockscaled::VariantLauncher& entry = blockscaled::kBsVariantLaunchers[line]();
  if (static_cast<size_t>(entry.smem_bytes) > dev.smem_per_block_optin)
    return Status::Error(StatusCode::kUnsupportedDevice, std::string(who) + ": kernel needs " +
                                                             std::to_string(entry.smem_bytes) +
                                                             " bytes of shared memory per block; the device allows " +
                                                             std::to_string(dev.smem_per_block_optin));

  // Maps as the GEMM core's: A in boxes of the tile's rows (M where M is smaller: boxes past the
  // last row stream slower, gemm::a_box_rows), B in boxes of the tile's columns, D in the
  // epilogue's staged chunks.
  const int a_box_rows = gemm::a_box_rows(x.m, cfg.block_m);
  hopper::TensorMap2dSpec sa = hopper::dense_2d(x.a, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, x.m, x.k,
                                                static_cast<uint32_t>(a_box_rows), 128);
  hopper::TensorMap2dSpec sb = hopper::dense_2d(x.b, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, x.n, x.k,
                                                static_cast<uint32_t>(cfg.block_n), 128);
  const int ob = f32 ? 4 : 2;
  const int chunk_bytes = gemm::epi_chunk_bytes(cfg.block_n, ob);
  hopper::TensorMap2dSpec sd =
      hopper::dense_2d(x.d, f32 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, ob, x.m, x.n, 64,
                       static_cast<uint32_t>(chunk_bytes / ob));
  sd.swizzle = chunk_bytes == 128 ? hopper::TmaSwizzle::k128B
               : chunk_bytes == 64 ? hopper::TmaSwizzle::k64B
                                   : hopper::TmaSwizzle::k32B;
  sd.l2_promotion = CU_TENSOR_MAP_L2_PROMOTION_NONE;
  CUtensorMap tm_a, tm_b, tm_d;
  LOWBIT_RETURN_IF_ERROR(hopper::make_tensor_map_2d(sa, &tm_a));
  LOWBIT_RETURN_IF_ERROR(hopper::make_tensor_map_2d(sb, &tm_b));
  LOWBIT_RETURN_IF_ERROR(hopper::make_tensor_map_2d(sd, &tm_d));
  // The A scales' map where the tile takes them a group of K blocks per copy (a_scale_group): rows of
  // M floats, one per K block, sfa_ld apart; boxes of the group's K blocks x the A box's rows rounded
  // up to 4 (sfa_box: the box stops at M as the A box does, but for up to 3 columns of 16-byte
  // rounding). Elsewhere D stands in (the kernel does not read it).
  const int a_group = blockscaled::a_scale_group(cfg.block_m, cfg.block_n, blockscaled::BsProblems::kDense);
  const int sfa_box = (a_box_rows + 3) / 4 * 4;
  CUtensorMap tm_sfa = tm_d;
  // The last tile row's A box, which stops at M (gemm::a_tail; A's own map where there is none).
  const gemm::ATail a_tail = gemm::a_tail(x.m, cfg.block_m);
  CUtensorMap tm_a_tail = tm_a;
  if (a_tail.rows > 0) {
    hopper::TensorMap2dSpec st = sa;
    st.box_rows = static_cast<uint32_t>(a_tail.rows);
    LOWBIT_RETURN_IF_ERROR(hopper::make_tensor_map_2d(st, &tm_a_tail));
  }
  if (a_group > 1) {
    hopper::TensorMap2dSpec ss = hopper::dense_2d(x.sfa, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, gemm::k_blocks(x.k), x.m,
                                                  static_cast<uint32_t>(a_group), static_cast<uint32_t>(sfa_box));
    ss.row_stride_bytes = static_cast<uint64_t>(x.sfa_ld) * 4;
    ss.swizzle = hopper::TmaSwizzle::kNone;
    LOWBIT_RETURN_IF_ERROR(hopper::make_tensor_map_2d(ss, &tm_sfa));
  }

  gemm::KernelParams p{};
  const int k_blocks = gemm::k_blocks(x.k);
  p.sched =
      gemm::tile_schedule(x.m, x.n, k_blocks, cfg.block_m, cfg.block_n, 1, cfg.splits, cfg.raster_group, dev.sm_count);
  p.walk = gemm::TileWalk::of(p.sched);
  p.set_problem(x.m, x.n, x.k, a_box_rows, 1.0f, nullptr, nullptr);
  p.set_a_tail(a_tail);
  p.epi.row_period = 1;
  p.bs = {x.sfa, x.sfa_ld, x.sfb, k_blocks, sfa_box};
  if (!in_cluster) gemm::bind_split_k_workspace(p, x.workspace);
  const int units = p.sched.num_units();
  int launched = 0;
  const cudaError_t e =
      entry.launch(cfg.grid, units, stream, tm_a, tm_b, tm_d, tm_sfa, tm_a_tail, p, dev.device, &launched);
  auto describe = [&] {
    return std::string(who) + " " + std::to_string(x.m) + "x" + std::to_string(x.n) + "x" + std::to_string(x.k) +
           " " + dense_text(cfg, in_cluster);
  };
  return gemm::launch_status(e, describe, launched, units);
}

size_t fp8_grouped_workspace_size(int max_groups) {
  return max_groups > 0 ? blockscaled::GroupedWorkspace::bytes(max_groups) : 0;
}

Status fp8_grouped_validate(const Fp8GroupedProblem* problems, int groups) {
  LOWBIT_RETURN_IF_ERROR(check::ArgCheck("fp8_grouped_gemm")
                             .dim("groups", groups, 1, gemm::kMaxGroups)
                             .ptr("the problem array", problems, alignof(Fp8GroupedProblem))
                             .status());
  for (int g = 0; g < groups; ++g) {
    const int err = blockscaled::check_group(problems[g]);
    if (err != blockscaled::kGroupOk)
      return Status::Invalid("fp8_grouped_gemm: group " + std::to_string(g) + ": " + blockscaled::group_error_text(err));
  }
  return Status::Ok();
}

Status fp8_grouped_gemm(const Fp8GroupedProblem* problems, int groups, OutType out_type, void* workspace,
                        size_t workspace_bytes, cudaStream_t stream, const BlockScaledConfig* forced) {
  const char* who = "fp8_grouped_gemm";
  const BlockScaledConfig cfg = forced ? *forced : BlockScaledConfig{};
  check::ArgCheck c(who);
  c.dim("groups", groups, 1, gemm::kMaxGroups)
      .ptr("the problem array", problems, alignof(Fp8GroupedProblem), check::Null::kRefused,
           check::extent(groups, sizeof(Fp8GroupedProblem)))
      .out("workspace", workspace, 128, check::extent_of(workspace_bytes))
      .rule(workspace_bytes < fp8_grouped_workspace_size(groups), StatusCode::kWorkspaceTooSmall,
            [&] {
              return std::to_string(groups) + " groups need " + std::to_string(fp8_grouped_workspace_size(groups)) +
                     " bytes of workspace, got " + std::to_string(workspace_bytes);
            })
      .rule(out_type != OutType::kBF16 && out_type != OutType::kFP32, [] { return std::string("out_type must be BF16 or FP32 (FP16 is fp8_gemm's alone)"); });
  LOWBIT_RETURN_IF_ERROR(c.status());
  LOWBIT_RETURN_IF_ERROR(check_grouped_config(who, cfg));
  const DeviceInfo* devp = nullptr;
  LOWBIT_RETURN_IF_ERROR(c.device(&devp));
  const blockscaled::GroupedWorkspace ws = blockscaled::GroupedWorkspace::at(workspace, groups);
  return launch_grouped(who, blockscaled::DescriptorArray{problems}, problems, groups, out_type, ws, cfg, *devp, stream);
}

namespace {
// The layouts' shared tail (masked, contiguous): the workspace (room for the descriptors the
// preparation kernel builds), the forced config and the device, then the two launches.
template <class Layout>
Status launch_layout(const char* who, check::ArgCheck& c, const Layout& layout, int groups, OutType out_type,
                     void* workspace, size_t workspace_bytes, const BlockScaledConfig& cfg, cudaStream_t stream) {
  const size_t need = blockscaled::GroupedWorkspace::bytes_with_problems(groups);
  c.out("workspace", workspace, 128, check::extent_of(workspace_bytes))
      .rule(workspace_bytes < need, StatusCode::kWorkspaceTooSmall, [&] {
        return std::to_string(groups) + " groups need " + std::to_string(need) + " bytes of workspace, got " +
               std::to_string(workspace_bytes);
      });
  LOWBIT_RETURN_IF_ERROR(c.status());
  LOWBIT_RETURN_IF_ERROR(check_grouped_config(who, cfg));
  const DeviceInfo* devp = nullptr;
  LOWBIT_RETURN_IF_ERROR(c.device(&devp));
  const blockscaled::GroupedWorkspace ws = blockscaled::GroupedWorkspace::at(workspace, groups, true);
  return launch_grouped(who, layout, ws.problems, groups, out_type, ws, cfg, *devp, stream);
}
}  // namespace

size_t fp8_grouped_masked_workspace_size(int groups) {
  return groups > 0 ? blockscaled::GroupedWorkspace::bytes_with_problems(groups) : 0;
}

Status fp8_grouped_gemm_masked(const Fp8MaskedGroupedArgs& a, cudaStream_t stream, const BlockScaledConfig* forced) {
  const char* who = "fp8_grouped_gemm_masked";
  const BlockScaledConfig cfg = forced ? *forced : BlockScaledConfig{};
  const int64_t kb = (a.k + 127) / 128, nb = (a.n + 127) / 128;
  const int64_t g = a.groups, ob = a.out_type == OutType::kFP32 ? 4 : 2;
  using check::extent;
  check::ArgCheck c(who);
  c.dim("groups", a.groups, 1, gemm::kMaxGroups)
      .dim("max_m", a.max_m, 1, blockscaled::kGroupMaxDim)
      .dim("n", a.n, 16, blockscaled::kGroupMaxDim)
      .dim("k", a.k, 16, blockscaled::kGroupMaxDim)
      .rule(a.sfa_ld < a.max_m || a.sfa_ld % 4 != 0, [] { return std::string("sfa_ld must be >= max_m and a multiple of 4"); })
      .rule(a.out_type != OutType::kBF16 && a.out_type != OutType::kFP32,
            [] { return std::string("out_type must be BF16 or FP32 (FP16 is fp8_gemm's alone)"); });
  LOWBIT_RETURN_IF_ERROR(c.status());
  c.ptr("A", a.a, 16, check::Null::kRefused, extent(g * a.max_m, a.k))
      .ptr("B", a.b, 16, check::Null::kRefused, extent(g * a.n, a.k))
      .out("D", a.d, 16, extent(g * a.max_m, a.n, ob))
      .ptr("sfa", a.sfa, 16, check::Null::kRefused, extent(g * kb, a.sfa_ld, 4))
      .ptr("sfb", a.sfb, 4, check::Null::kRefused, extent(g * nb, kb, 4))
      .ptr("masked_m", a.masked_m, 4, check::Null::kRefused, extent(g, 4));
  const blockscaled::MaskedLayout layout{a.masked_m,
                                         a.max_m,
                                         static_cast<int>(a.n),
                                         static_cast<int>(a.k),
                                         static_cast<const uint8_t*>(a.a),
                                         static_cast<const uint8_t*>(a.b),
                                         static_cast<uint8_t*>(a.d),
                                         a.sfa,
                                         a.sfb,
                                         a.sfa_ld,
                                         static_cast<int>(ob)};
  return launch_layout(who, c, layout, a.groups, a.out_type, a.workspace, a.workspace_bytes, cfg, stream);
}

size_t fp8_grouped_contiguous_workspace_size(int groups) {
  return groups > 0 ? blockscaled::GroupedWorkspace::bytes_with_problems(groups) : 0;
}

Status fp8_grouped_gemm_contiguous(const Fp8ContiguousGroupedArgs& a, cudaStream_t stream,
                                   const BlockScaledConfig* forced) {
  const char* who = "fp8_grouped_gemm_contiguous";
  const BlockScaledConfig cfg = forced ? *forced : BlockScaledConfig{};
  const int64_t kb = (a.k + 127) / 128, nb = (a.n + 127) / 128;
  const int64_t g = a.groups, ob = a.out_type == OutType::kFP32 ? 4 : 2;
  using check::extent;
  check::ArgCheck c(who);
  c.dim("groups", a.groups, 1, gemm::kMaxGroups)
      .dim("rows", a.rows, 1, blockscaled::kGroupMaxDim)
      .dim("n", a.n, 16, blockscaled::kGroupMaxDim)
      .dim("k", a.k, 16, blockscaled::kGroupMaxDim)
      .rule(a.sfa_ld < a.rows || a.sfa_ld % 4 != 0, [] { return std::string("sfa_ld must be >= rows and a multiple of 4"); })
      .rule(a.out_type != OutType::kBF16 && a.out_type != OutType::kFP32,
            [] { return std::string("out_type must be BF16 or FP32 (FP16 is fp8_gemm's alone)"); });
  LOWBIT_RETURN_IF_ERROR(c.status());
  c.ptr("A", a.a, 16, check::Null::kRefused, extent(a.rows, a.k))
      .ptr("B", a.b, 16, check::Null::kRefused, extent(g * a.n, a.k))
      .out("D", a.d, 16, extent(a.rows, a.n, ob))
      .ptr("sfa", a.sfa, 16, check::Null::kRefused, extent(kb, a.sfa_ld, 4))
      .ptr("sfb", a.sfb, 4, check::Null::kRefused, extent(g * nb, kb, 4))
      .ptr("offsets", a.offsets, 4, check::Null::kRefused, extent(g + 1, 4));
  const blockscaled::ContiguousLayout layout{a.offsets,
                                             a.rows,
                                             static_cast<int>(a.n),
                                             static_cast<int>(a.k),
                                             static_cast<const uint8_t*>(a.a),
                                             static_cast<const uint8_t*>(a.b),
                                             static_cast<uint8_t*>(a.d),
                                             a.sfa,
                                             a.sfb,
                                             a.sfa_ld,
                                             static_cast<int>(ob)};
  return launch_layout(who, c, layout, a.groups, a.out_type, a.workspace, a.workspace_bytes, cfg, stream);
}

Status fp8_grouped_check_status(const void* workspace, cudaStream_t stream) {
  static_assert(blockscaled::kGroupOk == 0, "status word: 0 is Ok");
  return gemm::read_grouped_status(workspace, stream, "fp8_grouped_check_status", "fp8_grouped_gemm",
                                   blockscaled::group_error_text);
}

}  // namespace lowbit
