#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstdio>
#include <random>
#include <string>

#include <utility>
#include <vector>

#include "common/fast_div.h"
#include "gemm/core/epilogue_params.h"
#include "gemm/core/tail_plan.h"
#include "gemm/fp8/config.h"
#include "gemm/fp8/variant_table.h"
#include "gemm/fp8/variants.h"
#include "gemm/launch_common.h"
#include "lowbit/gemm.h"

using namespace lowbit;

namespace {
// The core's chooser scoring the per-tensor kernels, on a 132-SM H100.
std::vector<gemm::Candidate> fp8_scored(int64_t m, int64_t n, int64_t k) {
  return gemm::score_candidates(m, n, k, 132, fp8::fp8_score_options());
}
}  // namespace

TEST(Fp8Config, ParsesAndRejects) {
  Fp8GemmConfig c;
  ASSERT_TRUE(parse_fp8_config("bn=64,splits=3,group=4,grid=100", &c).ok());
  EXPECT_EQ(c.block_n, 64);
  EXPECT_EQ(c.splits, 3);
  EXPECT_EQ(c.raster_group, 4);
  EXPECT_EQ(c.grid, 100);
  EXPECT_EQ(c.stages, fp8::fp8_stages_for(64));
  EXPECT_FALSE(parse_fp8_config("bn=144", &c).ok());
  EXPECT_FALSE(parse_fp8_config("bn=128,foo=1", &c).ok());
  EXPECT_FALSE(parse_fp8_config("bn=abc", &c).ok());
  EXPECT_FALSE(parse_fp8_config("bn=128,stages=3", &c).ok());
  // 64-row tiles: only bn=64, with its own (deeper) ring.
  ASSERT_TRUE(parse_fp8_config("bn=64,bm=64,splits=2", &c).ok());
  EXPECT_EQ(c.block_m, 64);
  EXPECT_EQ(c.stages, fp8::fp8_stages_for(64, false, 64));
  EXPECT_NE(c.to_string().find("bm=64"), std::string::npos);
  EXPECT_FALSE(parse_fp8_config("bn=128,bm=64", &c).ok());
  EXPECT_FALSE(parse_fp8_config("bn=64,bm=32", &c).ok());
  // Resident row-broadcast rows: a switch, printed back.
  ASSERT_TRUE(parse_fp8_config("bn=128,resident=1", &c).ok());
  EXPECT_TRUE(c.resident_rows);
  EXPECT_NE(c.to_string().find("resident=1"), std::string::npos);
  EXPECT_FALSE(parse_fp8_config("bn=128,resident=2", &c).ok());
}

// The last tile row's A box (gemm::a_tail): only where M spans more than one tile row and stops
// inside the last; below one tile the whole box already stops at M (gemm::a_box_rows).
TEST(Fp8Config, LastTileRowBoxStopsAtM) {
  const std::array<int64_t, 4> cases[] = {
      // m, block_m, rows, block
      {129, 128, 1, 1}, {200, 128, 72, 1}, {383, 128, 127, 2}, {1000, 64, 40, 15}, {8191, 128, 127, 63}};
  for (const auto& c : cases) {
    const gemm::ATail t = gemm::a_tail(c[0], static_cast<int>(c[1]));
    EXPECT_EQ(t.rows, c[2]) << c[0];
    EXPECT_EQ(t.block, c[3]) << c[0];
    // The box and the tail cover M exactly.
    EXPECT_EQ(static_cast<int64_t>(t.block) * c[1] + t.rows, c[0]);
  }
  for (const auto& mb : {std::array<int64_t, 2>{128, 128}, {256, 128}, {100, 128}, {1, 64}, {4096, 128}, {64, 64}}) {
    const gemm::ATail t = gemm::a_tail(mb[0], static_cast<int>(mb[1]));
    EXPECT_EQ(t.rows, 0) << mb[0];
    EXPECT_EQ(t.block, -1) << mb[0];
  }
}

TEST(Fp8Config, ResidentRowsFitAndApply) {
  // 4 stages next to 256 rows of 128 columns, the output staging and the bias.
  EXPECT_EQ(fp8::fp8_stages_for(fp8::kFp8ResidentBlockN, true, 128, fp8::kFp8ResidentMaxRows), 4);
  EXPECT_LE(4 * (16384 + 128 * 128) + fp8::fp8_resident_epi_bytes(128, 256) + 2048, 232448);
  EXPECT_TRUE(fp8::fp8_resident_applies(768, 196, 132));
  EXPECT_FALSE(fp8::fp8_resident_applies(768, 257, 132));
  EXPECT_FALSE(fp8::fp8_resident_applies(768, 0, 132));
  EXPECT_FALSE(fp8::fp8_resident_applies(128 * 133, 196, 132));  // more N tiles than SMs
  EXPECT_TRUE(fp8::fp8_resident_by_default(128 * 22, 768, 196, 132));   // 132 tiles: one wave
  EXPECT_FALSE(fp8::fp8_resident_by_default(128 * 21, 768, 196, 132));  // 126 tiles
  Fp8GemmConfig c;
  c.block_n = 192;
  c.splits = 2;
  fp8::fp8_make_resident(&c, 768, 132);
  EXPECT_EQ(c.block_n, 128);
  EXPECT_EQ(c.splits, 1);
  EXPECT_EQ(c.raster_group, 1);
  EXPECT_EQ(c.grid, 132);  // 22 CTAs per N block
  fp8::fp8_make_resident(&c, 640, 132);  // 5 N tiles
  EXPECT_EQ(c.grid, 130);
}

TEST(Fp8Config, StagesFitSharedMemory) {
  for (const auto& v : fp8::kFp8Variants) {
    EXPECT_GE(v.stages, 4) << v.block_n;
    EXPECT_LE(v.stages * (v.block_m * 128 + v.block_n * 128) + 16384 * (v.block_m / 64) + 2048 + v.block_n * 2,
              232448)
        << v.block_n;
    if (v.block_m == 64) {  // one consumer warpgroup: half the A bytes per stage
      EXPECT_EQ(v.stages, v.block_n == 64 ? 13 : 9) << v.block_n;
      EXPECT_EQ(v.fused_stages, 0);
      EXPECT_FALSE(v.promote2);
      continue;
    }
    // Fused variants also hold both warpgroups' row-broadcast rows and bias slices
    // (fp8_fused_epi_bytes); 3 stages still overlap TMA and MMA. A tile width without one
    // (fused_stages 0) is 256 or an in-between width (not a multiple of 64).
    if (v.fused_stages == 0) {
      EXPECT_TRUE(v.block_n >= 256 || v.block_n % 64 != 0) << v.block_n << " must have a fused variant";
      continue;
    }
    EXPECT_EQ(v.fused_stages, fp8::fp8_stages_for(v.block_n, true)) << v.block_n;
    EXPECT_GE(v.fused_stages, 3) << v.block_n;
    EXPECT_LT(v.fused_stages, v.stages) << v.block_n;
    EXPECT_EQ(fp8::fp8_fused_epi_bytes(v.block_n), 32768 + 2 * 64 * v.block_n * 2 + 2 * v.block_n * 2)
        << "output staging, two warpgroups' 64 row-broadcast rows and bias slices";
    EXPECT_LE(v.fused_stages * (16384 + v.block_n * 128) + fp8::fp8_fused_epi_bytes(v.block_n) + 2048, 232448)
        << v.block_n;
  }
}

TEST(Fp8Config, ChooserCoversEveryBenchShape) {
  const int64_t shapes[][3] = {{4096, 8192, 8192}, {8192, 8192, 8192}, {64, 2112, 7168}, {128, 7168, 16384},
                               {4096, 32768, 512}, {1, 16, 16}, {3, 48, 144}};
  for (const auto& s : shapes) {
    const auto cands = fp8_scored(s[0], s[1], s[2]);
    ASSERT_FALSE(cands.empty());
    const auto& best = cands.front().config;
    EXPECT_GE(best.splits, 1);
    EXPECT_LE(best.splits, gemm::k_blocks(s[2]));
    EXPECT_FALSE(best.reason.empty());
    for (size_t i = 1; i < cands.size(); ++i) EXPECT_GT(cands[i].t_total_us, 0.0);
  }
  // Small M with few tiles should split K to occupy the SMs.
  const auto small = fp8_scored(128, 4096, 7168);
  const Fp8GemmConfig& pick = small.front().config;
  EXPECT_GT(pick.splits * gemm::tile_count(128, 4096, pick.block_m, pick.block_n), 64);
  EXPECT_NE(explain_fp8_config(128, 4096, 7168).find("candidates"), std::string::npos);
}

// At M <= 64 the 128-row tile works like the 64-row one (a 64-row A box, one consumer
// warpgroup), so the model ties them; the tie goes by what was measured (docs/perf.md W1,
// "small-M tile ties by what binds"): the 128-row tile's ring where DRAM binds, the 64-row tile's
// deeper one where each CTA's stream does.
TEST(Fp8Config, SmallMTilesTieByWhatBinds) {
  const auto dram = fp8_scored(64, 7168, 16384);
  EXPECT_EQ(dram.front().config.block_m, 128) << dram.front().config.to_string();
  EXPECT_EQ(dram.front().config.block_n, 64) << dram.front().config.to_string();
  EXPECT_STREQ(dram.front().bound, "memory");
  const auto stream = fp8_scored(64, 4096, 7168);
  EXPECT_EQ(stream.front().config.block_m, 64) << stream.front().config.to_string();
  EXPECT_STREQ(stream.front().bound, "stream");
  // Both tiles are costed on the 64 rows they compute and stream.
  const gemm::Candidate* tall = nullptr;
  const gemm::Candidate* short_tile = nullptr;
  for (const auto& c : dram)
    if (c.config.block_n == 64 && c.config.splits == 1 && c.config.promote_every == 1)
      (c.config.block_m == 128 ? tall : short_tile) = &c;
  ASSERT_TRUE(tall && short_tile);
  EXPECT_DOUBLE_EQ(tall->t_compute_us, short_tile->t_compute_us);
  EXPECT_DOUBLE_EQ(tall->t_stream_us, short_tile->t_stream_us);
}

// The staggered consumers (lead=1) were removed: the key is refused like any unknown one.
TEST(Fp8Config, LeadIsGone) {
  Fp8GemmConfig c;
  EXPECT_EQ(parse_fp8_config("bn=256,promote=2,lead=1", &c).code(), StatusCode::kInvalidArgument);
}

// The overlapped epilogue: compiled for bn=256 promote=2 (BF16 out; plain and staged, W1 v20) and
// bn=128 promote=1 (plain), unsplit; the chooser takes it where it was measured to win, and a
// candidate whose output or epilogue has no overlapped twin runs without it.
TEST(Fp8Config, OverlappedEpilogue) {
  Fp8GemmConfig c;
  ASSERT_TRUE(parse_fp8_config("bn=256,promote=2,overlap=1", &c).ok());
  EXPECT_TRUE(c.overlap);
  EXPECT_NE(c.to_string().find("overlap=1"), std::string::npos) << c.to_string();
  EXPECT_TRUE(fp8::fp8_config_compiled(c, Fp8EpilogueKind::kPlain, false));
  EXPECT_FALSE(fp8::fp8_config_compiled(c, Fp8EpilogueKind::kPlain, true));  // FP32 out
  EXPECT_TRUE(fp8::fp8_config_compiled(c, Fp8EpilogueKind::kBias, false));   // a bias, per-row scales
  EXPECT_FALSE(fp8::fp8_config_compiled(c, Fp8EpilogueKind::kBias, false, true));  // FP16 out
  EXPECT_FALSE(fp8::fp8_config_compiled(c, Fp8EpilogueKind::kFused, false));
  Fp8GemmConfig usable = c;
  ASSERT_TRUE(fp8::fp8_usable_config(&usable, Fp8EpilogueKind::kPlain, true));
  EXPECT_FALSE(usable.overlap);
  for (const char* text : {"bn=176,promote=2,overlap=1", "bn=128,promote=2,overlap=1", "bn=192,promote=2,overlap=1",
                           "bn=64,overlap=1", "bn=64,bm=64,overlap=1", "bn=256,overlap=1"}) {
    ASSERT_TRUE(parse_fp8_config(text, &c).ok()) << text;
    EXPECT_FALSE(fp8::fp8_config_compiled(c, Fp8EpilogueKind::kPlain, false)) << text;
  }
  ASSERT_TRUE(parse_fp8_config("bn=128,overlap=1", &c).ok());
  EXPECT_TRUE(fp8::fp8_config_compiled(c, Fp8EpilogueKind::kPlain, true));
  // Its staged twin tied at M <= 128 and is not compiled (W1 v20): the pick runs without overlap.
  EXPECT_FALSE(fp8::fp8_config_compiled(c, Fp8EpilogueKind::kBias, false));
  usable = c;
  ASSERT_TRUE(fp8::fp8_usable_config(&usable, Fp8EpilogueKind::kBias, false));
  EXPECT_FALSE(usable.overlap);
  EXPECT_EQ(parse_fp8_config("bn=128,overlap=2", &c).code(), StatusCode::kInvalidArgument);

  // M = 4096: the 256-wide tile, overlapped; W1's square shapes too (8192^3 went from the 176-wide
  // tile to it: 870 vs 903 us).
  for (const auto& shape : {std::array<int64_t, 3>{4096, 32768, 512}, {4096, 24576, 1536}, {4096, 8192, 8192},
                            {8192, 8192, 8192}, {4096, 7168, 2048}}) {
    const auto best = fp8_scored(shape[0], shape[1], shape[2]).front().config;
    EXPECT_TRUE(best.block_n == 256 && best.promote_every == 2 && best.overlap) << best.to_string();
  }
  // 4096 x 2112: 256-wide tiles leave the third wave nearly empty; the 176-wide tile stays.
  EXPECT_EQ(fp8_scored(4096, 2112, 7168).front().config.block_n, 176);
  // Never with a split.
  for (const auto& cand : fp8_scored(128, 4096, 7168)) {
    if (cand.config.splits > 1) {
      EXPECT_FALSE(cand.config.overlap) << cand.config.to_string();
    }
  }
}

// The balanced grid: where long units would leave a partial last round, the chooser runs as many
// CTAs as give every one the same number of units; short units and whole waves keep one per SM.
TEST(Fp8Config, BalancedGrid) {
  auto best = [](int64_t m, int64_t n, int64_t k) { return fp8_scored(m, n, k).front().config; };
  // The best even-column candidate (the uneven twin fills whole waves instead: UnevenColumnLayout).
  auto best_even = [](int64_t m, int64_t n, int64_t k) {
    for (const auto& c : fp8_scored(m, n, k))
      if (!c.config.uneven) return c.config;
    return Fp8GemmConfig{};
  };
  // 2048 tiles of 128 x 256: 16 rounds either way, 128 CTAs run exactly 16 each.
  EXPECT_EQ(best_even(8192, 8192, 8192).grid, 128) << best_even(8192, 8192, 8192).to_string();
  EXPECT_EQ(best_even(4096, 8192, 8192).grid, 128);  // 1024 tiles, 8 rounds
  // Uneven columns: 33 tiles a row, 2112 and 1056 units, whole waves of 132.
  EXPECT_TRUE(best(8192, 8192, 8192).uneven) << best(8192, 8192, 8192).to_string();
  EXPECT_EQ(best(8192, 8192, 8192).grid, 0);
  EXPECT_TRUE(best(4096, 8192, 8192).uneven);
  EXPECT_EQ(best(4096, 8448, 8192).grid, 0);    // 1056 tiles: exactly 8 waves of 132
  EXPECT_EQ(best(4096, 24576, 1536).grid, 0);   // 12 K blocks per unit: measured to lose
  EXPECT_FALSE(best(4096, 24576, 1536).uneven);  // so did uneven columns
  EXPECT_FALSE(best(4096, 32768, 512).uneven);
  EXPECT_EQ(best(4096, 32768, 512).grid, 0);
  EXPECT_EQ(best(4096, 2112, 7168).block_n, 176);
  EXPECT_EQ(best(4096, 2112, 7168).grid, 0);  // the 176-wide tile lost 0.5% with it
  for (int units : {133, 1000, 2048, 3072})
    for (int sms : {114, 132}) {
      const int g = lowbit::gemm::balanced_grid(units, sms, 64);
      ASSERT_GT(g, 0);
      EXPECT_LE(g, sms);
      EXPECT_EQ((units + g - 1) / g, (units + sms - 1) / sms) << "same rounds: " << units << " units, " << sms;
    }
  EXPECT_EQ(lowbit::gemm::balanced_grid(100, 132, 64), 0);  // one round: one CTA per unit already
  EXPECT_EQ(lowbit::gemm::balanced_grid(264, 132, 64), 0);  // whole waves
}

// Uneven columns: every tile row covers [0, N) exactly with 240- and 256-wide tiles, in column
// order, each tile's B box inside [0, N); the units walk the raster of TileSchedule::unit (with
// reciprocal divisions); as many tiles a row as fill the waves best; the wide ones spread so
// that no CTA runs more than its share rounded up (8192^3 on 132 SMs: 9 wide + 7 narrow, 15.56
// tiles of 256 against 16 before).
TEST(Fp8Config, UnevenColumnLayout) {
  EXPECT_EQ(gemm::uneven_tiles_n(8192, 8192, 128, 256, 132), 33);  // 2112 tiles: 16 waves
  EXPECT_EQ(gemm::uneven_tiles_n(4096, 8192, 128, 256, 132), 33);  // 1056: 8 waves
  EXPECT_EQ(gemm::uneven_tiles_n(8192, 8192, 128, 256, 128), 32);  // 128 CTAs: 2048 was whole
  EXPECT_EQ(gemm::uneven_tiles_n(4096, 24576, 128, 256, 132), 99);  // 3168 tiles: 24 waves
  EXPECT_EQ(gemm::uneven_tiles_n(4096, 7168, 128, 256, 132), 28);   // 29 or more: more rounds
  EXPECT_EQ(gemm::uneven_tiles_n(1, 608, 128, 256, 1), 0);   // 2 x 256 < 608 < 3 x 240
  EXPECT_EQ(gemm::uneven_tiles_n(1, 3344, 128, 256, 1), 0);  // the largest such N
  EXPECT_GT(gemm::uneven_tiles_n(1, 3360, 128, 256, 1), 0);
  EXPECT_EQ(gemm::uneven_tiles_n(1, 240, 128, 256, 1), 0);   // narrower than one tile
  EXPECT_EQ(gemm::uneven_tiles_n(1, 8200, 128, 256, 1), 0);  // not a multiple of 16
  EXPECT_EQ(gemm::uneven_layout(8192, 256, gemm::tile_schedule(8192, 8192, 32, 128, 256, 1, 1, 16, 132, 132)).wide,
            17);  // 17 x 256 + 16 x 240
  Fp8GemmConfig c;
  ASSERT_TRUE(parse_fp8_config("bn=256,promote=2,overlap=1,uneven=1", &c).ok());
  EXPECT_TRUE(c.uneven);
  EXPECT_NE(c.to_string().find("uneven=1"), std::string::npos);
  EXPECT_TRUE(fp8::fp8_config_compiled(c, Fp8EpilogueKind::kPlain));
  EXPECT_FALSE(fp8::fp8_config_compiled(c, Fp8EpilogueKind::kPlain, /*out_fp32=*/true));
  EXPECT_TRUE(fp8::fp8_config_compiled(c, Fp8EpilogueKind::kBias));  // the staged twin (W1 v20)
  EXPECT_FALSE(fp8::fp8_config_compiled(c, Fp8EpilogueKind::kBias, /*out_fp32=*/false, /*out_fp16=*/true));
  c.overlap = false;
  EXPECT_FALSE(fp8::fp8_config_compiled(c, Fp8EpilogueKind::kPlain));
  EXPECT_FALSE(parse_fp8_config("bn=256,uneven=2", &c).ok());

  struct Shape {
    int64_t m, n;
    int group, grid;
  };
  for (const Shape& sh : {Shape{8192, 8192, 16, 132}, Shape{4096, 8192, 16, 132}, Shape{300, 480, 1, 3},
                          Shape{1000, 992, 1, 5}, Shape{1000, 2000, 2, 5}, Shape{4096, 24576, 16, 132},
                          Shape{4096, 32768, 16, 132}, Shape{129, 256, 1, 1}, Shape{640, 7680, 3, 7},
                          Shape{2048, 8208, 4, 13}, Shape{8192, 3360, 16, 132}, Shape{100, 992, 16, 5},
                          Shape{1024, 992, 8, 5}, Shape{1152, 992, 4, 7}}) {
    SCOPED_TRACE(std::to_string(sh.m) + "x" + std::to_string(sh.n) + " group " + std::to_string(sh.group) +
                 " grid " + std::to_string(sh.grid));
    const auto s = gemm::tile_schedule(sh.m, sh.n, 4, 128, 256, 1, 1, sh.group, 132, /*uneven_grid=*/sh.grid);
    const auto layout = gemm::uneven_layout(sh.n, 256, s);
    const auto walk = gemm::TileWalk::of(s);
    ASSERT_EQ(s.tiles_n, gemm::uneven_tiles_n(sh.m, sh.n, 128, 256, sh.grid));
    ASSERT_GT(s.tiles_n, 0);
    ASSERT_GE(layout.wide, 0);
    ASSERT_LE(layout.wide, s.tiles_n);
    std::vector<std::vector<std::pair<int, int>>> rows(s.tiles_m);  // (col0, width) per tile row
    std::vector<int64_t> cta_columns(sh.grid, 0);
    for (int u = 0; u < s.num_units(); ++u) {
      const gemm::WorkUnit w = layout.unit(s, walk, u);
      const gemm::WorkUnit e = s.unit(u);
      ASSERT_EQ(w.m_block, e.m_block) << "unit " << u;
      ASSERT_EQ(w.n_block, e.n_block) << "unit " << u;
      ASSERT_EQ(w.kb_begin, e.kb_begin);
      ASSERT_EQ(w.kb_end, e.kb_end);
      ASSERT_TRUE(w.trim == 0 || w.trim == 16);
      ASSERT_EQ(w.col0 % 16, 0) << "every tile starts on a 32-byte sector of a 16-bit output";
      const int width = 256 - w.trim;
      ASSERT_GE(w.col0, 0);
      ASSERT_LE(w.col0 + width, sh.n) << "the tile (and its B box) stays inside N";
      rows[w.m_block].push_back({w.col0, width});
      cta_columns[u % sh.grid] += width;
    }
    for (auto& row : rows) {
      std::sort(row.begin(), row.end());
      ASSERT_EQ(static_cast<int>(row.size()), s.tiles_n);
      int at = 0, wide = 0;
      for (auto [col0, width] : row) {
        ASSERT_EQ(col0, at) << "tiles follow each other without a gap or an overlap";
        at += width;
        wide += width == 256;
      }
      EXPECT_EQ(at, sh.n);
      EXPECT_EQ(wide, layout.wide);
    }
    // The square shapes: 16 (8) rounds, no CTA with more than 9 (5) wide tiles, where the
    // average is 8.2 (4.1); 16 x 256 (8 x 256) before.
    const int64_t most = *std::max_element(cta_columns.begin(), cta_columns.end());
    if (sh.m == 8192 && sh.n == 8192) {
      EXPECT_LE(most, 9 * 256 + 7 * 240);
    }
    if (sh.m == 4096 && sh.n == 8192) {
      EXPECT_LE(most, 5 * 256 + 3 * 240);
    }
  }
}

// Promotion every two K blocks: parsed, printed, compiled only for the plain epilogue of the wide
// tiles; the chooser takes it only where it models a gain (compute-bound shapes), never for a
// bias or a fused epilogue.
TEST(Fp8Config, PromoteEveryTwo) {
  Fp8GemmConfig c;
  ASSERT_TRUE(parse_fp8_config("bn=256,promote=2", &c).ok());
  EXPECT_EQ(c.promote_every, 2);
  EXPECT_NE(c.to_string().find("promote=2"), std::string::npos);
  EXPECT_TRUE(fp8::fp8_config_compiled(c, Fp8EpilogueKind::kPlain));
  // The staged epilogue (bias, per-row scales) in BF16 only.
  EXPECT_TRUE(fp8::fp8_config_compiled(c, Fp8EpilogueKind::kBias));
  EXPECT_FALSE(fp8::fp8_config_compiled(c, Fp8EpilogueKind::kBias, /*out_fp32=*/true));
  EXPECT_FALSE(fp8::fp8_config_compiled(c, Fp8EpilogueKind::kBias, false, /*out_fp16=*/true));
  EXPECT_FALSE(fp8::fp8_config_compiled(c, Fp8EpilogueKind::kFused));
  c.cluster = 2;  // CTA pairs: the widest tile promotes every two K blocks too, plain epilogue only
  EXPECT_TRUE(fp8::fp8_config_compiled(c, Fp8EpilogueKind::kPlain));
  EXPECT_FALSE(fp8::fp8_config_compiled(c, Fp8EpilogueKind::kBias));
  ASSERT_TRUE(parse_fp8_config("bn=128,promote=2,cluster=2", &c).ok());
  EXPECT_FALSE(fp8::fp8_config_compiled(c, Fp8EpilogueKind::kPlain));
  ASSERT_TRUE(parse_fp8_config("bn=256,cluster=2", &c).ok());
  EXPECT_FALSE(fp8::fp8_config_compiled(c, Fp8EpilogueKind::kPlain));
  // The in-between width: plain and bias epilogues, both promotion intervals, no fused one.
  ASSERT_TRUE(parse_fp8_config("bn=176", &c).ok());
  EXPECT_TRUE(fp8::fp8_config_compiled(c, Fp8EpilogueKind::kPlain));
  EXPECT_TRUE(fp8::fp8_config_compiled(c, Fp8EpilogueKind::kBias));
  EXPECT_FALSE(fp8::fp8_config_compiled(c, Fp8EpilogueKind::kFused));
  c.promote_every = 2;
  EXPECT_TRUE(fp8::fp8_config_compiled(c, Fp8EpilogueKind::kPlain));
  // Its chunked epilogue: 352-byte BF16 rows in 32-byte boxes, 704-byte FP32 rows in 64-byte ones.
  EXPECT_EQ(gemm::epi_chunk_bytes(176, 2), 32);
  EXPECT_EQ(gemm::epi_chunk_bytes(176, 4), 64);
  EXPECT_EQ(gemm::epi_chunk_bytes(256, 2), 128);
  ASSERT_TRUE(parse_fp8_config("bn=64,promote=2", &c).ok());
  EXPECT_FALSE(fp8::fp8_config_compiled(c, Fp8EpilogueKind::kPlain));
  ASSERT_TRUE(parse_fp8_config("bn=128,promote=3", &c).ok());
  EXPECT_FALSE(fp8::fp8_config_compiled(c, Fp8EpilogueKind::kPlain));
  EXPECT_EQ(gemm::promotion_groups(16, 2), 1);
  EXPECT_EQ(gemm::promotion_groups(384, 2), 2);  // 3 K blocks: a pair and a padded pair
  EXPECT_EQ(gemm::promotion_groups(512, 2), 2);
  EXPECT_EQ(gemm::promotion_groups(384, 1), 3);

  const auto big = fp8_scored(4096, 8192, 8192);
  EXPECT_EQ(big.front().config.promote_every, 2) << big.front().config.to_string();
  // Memory-bound: the promotion interval changes no byte, so the tie goes to per-block promotion.
  const auto small = fp8_scored(64, 7168, 16384);
  EXPECT_EQ(small.front().config.promote_every, 1) << small.front().config.to_string();
  for (const auto& cand : big) {
    if (cand.config.promote_every == 2) {
      EXPECT_TRUE(fp8::fp8_config_compiled(cand.config, Fp8EpilogueKind::kPlain));
    }
  }
}

// The tile classes' measured rates (docs/perf.md W1 v21): the 128-wide tile promoting every K block
// runs faster per FLOP than promoting every two and about as fast as the overlapped 256-wide tile, so
// it takes the middle of M where its rounds fit; the large-M picks stay; a family passes its own rates.
TEST(Fp8Config, TileRatesAsMeasured) {
  auto best = [](int64_t m, int64_t n, int64_t k) { return fp8_scored(m, n, k).front().config; };
  // 1024 x 10240 x 8192: 129.3 us promoting every block against 139.0 every two (call 139).
  EXPECT_EQ(best(1024, 10240, 8192).block_n, 128);
  EXPECT_EQ(best(1024, 10240, 8192).promote_every, 1) << best(1024, 10240, 8192).to_string();
  // 512 x 2112 x 7168: the unsplit 128 x 64 tile (14.5 us) ahead of the 176-wide split in two (20.7).
  EXPECT_EQ(best(512, 2112, 7168).block_n, 64) << best(512, 2112, 7168).to_string();
  EXPECT_EQ(best(512, 2112, 7168).splits, 1);
  // 2048 x 9216 x 7168: 78 units of 128 x 256 in one round; with the last unit's epilogue unhidden
  // the 128-wide tile's 1.2 rounds of 576 units go ahead (212.8 against 224.6 us).
  EXPECT_EQ(best(2048, 9216, 7168).block_n, 128) << best(2048, 9216, 7168).to_string();
  // Two tile rows whose second is more than half full: the narrow 128-row tile that makes one wave
  // (W1 v24: 256 x 5120 x 13824 35.0 us against 48.5 for 128 x 128 split in three; 256 x 7168 x 5120
  // 19.6 against 20.4). At M <= 64 they are unmeasured, and at 512 x 5120 x 13824 the model keeps its
  // pick (level with 128 x 80, W1 v27): neither takes them (M = 129-384: FewTileRowsAsMeasured).
  EXPECT_EQ(best(256, 5120, 13824).block_n, 80) << best(256, 5120, 13824).to_string();
  EXPECT_EQ(best(256, 5120, 13824).splits, 1);
  EXPECT_EQ(best(256, 7168, 5120).block_n, 112) << best(256, 7168, 5120).to_string();
  for (const auto& shape : {std::array<int64_t, 3>{16, 28672, 4096}, {64, 5120, 5120}, {512, 5120, 13824}}) {
    const auto c = best(shape[0], shape[1], shape[2]);
    EXPECT_FALSE(c.block_m == 128 && c.block_n > 64 && c.block_n < 128)
        << shape[0] << "x" << shape[1] << ": " << c.to_string();
  }
  // Where the overlapped 256-wide tile measured best, it stays (calls 139-140, W1).
  for (const auto& shape : {std::array<int64_t, 3>{4096, 8192, 8192}, {2048, 10240, 8192}, {1024, 32768, 6144}}) {
    const auto c = best(shape[0], shape[1], shape[2]);
    EXPECT_TRUE(c.block_n == 256 && c.overlap) << c.to_string();
  }
  // A family's own rates replace the per-tensor ones: with every class at one rate, the 128-wide
  // tile loses its lead at 1024 x 10240 x 8192.
  gemm::ScoreOptions flat = fp8::fp8_score_options();
  flat.tile_efficiency = [](int, int, int) { return 0.5; };
  EXPECT_NE(gemm::score_candidates(1024, 10240, 8192, 132, flat).front().config.block_n, 128);
}

// The narrow 128-row tiles at four to eight tile rows (384 < M <= 1024; docs/perf.md W1 v27, calls
// 170-172), scored at their measured rates: they fill the waves where 128 leaves the last one
// part-empty. Past eight rows (held out: 0.81-1.04x at M = 2560 and 3000) the model does not take
// them (two to four tile rows: FewTileRowsAsMeasured).
TEST(Fp8Config, NarrowTilesFourToEightRows) {
  auto best = [](int64_t m, int64_t n, int64_t k) { return fp8_scored(m, n, k).front().config; };
  // us, the pick against the model's before (call 170): 28.2 vs 35.3; 108.2 vs 118.0; 30.9 vs 35.6.
  for (const auto& shape : {std::array<int64_t, 4>{1024, 4608, 3584, 96}, {1024, 3584, 18944, 112}, {512, 7168, 5120, 112}}) {
    const auto c = best(shape[0], shape[1], shape[2]);
    EXPECT_TRUE(c.block_m == 128 && c.block_n == shape[3] && c.splits == 1)
        << shape[0] << "x" << shape[1] << "x" << shape[2] << ": " << c.to_string();
  }
  for (const auto& shape : {std::array<int64_t, 3>{3000, 7168, 20480}, {2560, 2048, 10944}, {1280, 10240, 8192}}) {
    const auto c = best(shape[0], shape[1], shape[2]);
    EXPECT_FALSE(c.block_m == 128 && c.block_n > 64 && c.block_n < 128 && c.head_cols == 0)
        << shape[0] << "x" << shape[1] << "x" << shape[2] << ": " << c.to_string();
  }
}

// One round of tiles at most 128 wide at M <= 128 (docs/perf.md W1 v31, calls 182-186): where the
// model split K for less than a split's own latency, the measured latency model takes the split back.
TEST(Fp8Config, SmallMOneRoundByLatency) {
  auto best = [](int64_t m, int64_t n, int64_t k) { return fp8_scored(m, n, k).front().config; };
  gemm::ScoreOptions off = fp8::fp8_score_options();
  off.small_m = nullptr;
  auto model = [&](int64_t m, int64_t n, int64_t k) {
    return gemm::score_candidates(m, n, k, 132, off).front().config;
  };
  // Unsplit, where the model split (us, unsplit against its split, call 182): 4.66 vs 5.5; 3.78 vs
  // 4.4 (split in three); 6.88 vs 7.7 (two 64-row rows); 11.8 vs 12.2.
  for (const auto& shape : {std::array<int64_t, 3>{1, 2048, 2048}, {64, 1536, 1536}, {128, 2048, 4096}, {1, 3072, 8192}}) {
    const auto c = best(shape[0], shape[1], shape[2]);
    EXPECT_TRUE(c.block_n == 64 && c.splits == 1) << shape[0] << "x" << shape[1] << "x" << shape[2] << ": " << c.to_string();
    EXPECT_GT(model(shape[0], shape[1], shape[2]).splits, 1) << "the model alone split it";
  }
  // Still split where K is long for the few CTAs the tile makes (8.3 vs 10.9 us; 9.6 vs 11.0), and
  // where unsplit CTAs and DRAM bind together (1 x 2816 x 18432: the split 6% faster, call 185).
  EXPECT_EQ(best(1, 1536, 8192).splits, 3) << best(1, 1536, 8192).to_string();
  EXPECT_EQ(best(1, 2048, 8192).splits, 2) << best(1, 2048, 8192).to_string();
  EXPECT_GT(best(1, 2816, 18432).splits, 1) << best(1, 2816, 18432).to_string();
  // Four splits through the workspace at 1024 x 1024 (1.5x slower than unsplit, calls 184, 186), and a
  // 128 x 128 tile split in two at M = 96 (22.8 us; 128 x 64 unsplit 1.22x faster, call 184).
  EXPECT_EQ(best(16, 1024, 1024).splits, 1) << best(16, 1024, 1024).to_string();
  EXPECT_EQ(model(16, 1024, 1024).splits, 4);
  EXPECT_TRUE(best(96, 5120, 8192).block_n == 64 && best(96, 5120, 8192).splits == 1) << best(96, 5120, 8192).to_string();
  EXPECT_TRUE(model(96, 5120, 8192).block_n == 128 && model(96, 5120, 8192).splits == 2);
  // Never more splits than the model's (two 64-row rows at N = 1280: three splits 0.75-0.9x, call 185).
  for (const auto& shape : {std::array<int64_t, 3>{100, 1280, 4864}, {80, 768, 2816}, {128, 1024, 3840}})
    EXPECT_LE(best(shape[0], shape[1], shape[2]).splits, model(shape[0], shape[1], shape[2]).splits)
        << shape[0] << "x" << shape[1] << "x" << shape[2];
  // Outside its scope (past M = 128, a wider or multi-round pick) the model's order stands.
  for (const auto& shape : {std::array<int64_t, 3>{64, 7168, 16384}, {64, 32768, 512}, {192, 2048, 2048}, {4096, 4096, 7168}})
    EXPECT_EQ(best(shape[0], shape[1], shape[2]).to_string(), model(shape[0], shape[1], shape[2]).to_string())
        << shape[0] << "x" << shape[1] << "x" << shape[2];
}

// Three 64-row tile rows (128 < M <= 192; docs/perf.md W1 v26, calls 168-169): the unsplit tile
// that fills one wave with the fewest bytes per CTA, or 64 x 112 at four waves or more; elsewhere
// the model. The block-scaled family, unmeasured there, keeps its model's order.
TEST(Fp8Config, FewTileRowsAsMeasured) {
  auto best = [](int64_t m, int64_t n, int64_t k) { return fp8_scored(m, n, k).front().config; };
  struct Pick { int64_t m, n, k; int block_m, block_n; };
  // us, the pick against the model's (call 168): 32.6 vs 45.6 (128 x 128 split in three); 9.0 vs
  // 12.1; 13.0 vs 14.3; 50.9 vs 55.9; 9.9 vs 11.1 (64 x 64, 75% of the wave); 66.6 vs 74.0 (four
  // waves and more); 38.9 vs 41.7 (held out, call 169).
  for (const Pick& p : {Pick{144, 5120, 13824, 128, 80}, Pick{160, 4608, 3584, 64, 112}, Pick{176, 6144, 4096, 128, 96},
                        Pick{192, 7168, 16384, 128, 112}, Pick{144, 2112, 7168, 64, 64},
                        Pick{176, 27648, 5120, 64, 112}, Pick{184, 10240, 8192, 128, 176}}) {
    const auto c = best(p.m, p.n, p.k);
    EXPECT_TRUE(c.block_m == p.block_m && c.block_n == p.block_n && c.splits == 1)
        << p.m << "x" << p.n << "x" << p.k << ": " << c.to_string();
  }
  // Three 128-row rows (256 < M <= 384, W1 v28, call 173): the same one-wave order over the 128-row
  // tiles: 34.5 against 47.1 us (128 x 128 split in three); 12.3 against 13.1; 17.6 against 24.3
  // (held out). No 64-row tile there, and nothing but the model's order without a one-wave tile.
  for (const Pick& p : {Pick{384, 3584, 14336, 128, 96}, Pick{320, 4608, 3584, 128, 112}, Pick{300, 3072, 8192, 128, 80}}) {
    const auto c = best(p.m, p.n, p.k);
    EXPECT_TRUE(c.block_m == p.block_m && c.block_n == p.block_n && c.splits == 1)
        << p.m << "x" << p.n << "x" << p.k << ": " << c.to_string();
  }
  EXPECT_EQ(best(352, 2048, 10944).block_m, 128) << best(352, 2048, 10944).to_string();
  {
    gemm::ScoreOptions off = fp8::fp8_score_options();
    off.few_rows = false;
    EXPECT_EQ(best(320, 28672, 4096).to_string(),
              gemm::score_candidates(320, 28672, 4096, 132, off).front().config.to_string());
  }
  // Two 128-row rows, the second more than half full (192 < M <= 256, W1 v29, call 176): the same
  // order, 64-row tiles included: 29.6 against 33.5 us (128 x 128 split in two); 10.4 against 11.6;
  // 16.2 against 21.3 (64 x 2048 split in two).
  for (const Pick& p : {Pick{256, 4096, 14336, 128, 64}, Pick{224, 2112, 7168, 64, 64}, Pick{240, 2048, 10944, 64, 64},
                        Pick{240, 5120, 14336, 128, 80}}) {
    const auto c = best(p.m, p.n, p.k);
    EXPECT_TRUE(c.block_m == p.block_m && c.block_n == p.block_n && c.splits == 1)
        << p.m << "x" << p.n << "x" << p.k << ": " << c.to_string();
  }
  // Not the 256-wide tile as the one wave (168 x 16384 x 3072: 26.3 against 25.1 us, held out), and
  // nothing at 128 or 385 rows.
  EXPECT_NE(best(168, 16384, 3072).block_n, 256) << best(168, 16384, 3072).to_string();
  for (int64_t m : {128, 385}) {
    gemm::ScoreOptions off = fp8::fp8_score_options();
    off.few_rows = false;
    EXPECT_EQ(best(m, 4608, 3584).to_string(),
              gemm::score_candidates(m, 4608, 3584, 132, off).front().config.to_string()) << m;
  }
  // Where the rule finds no one-wave tile, the list is the model's, candidate for candidate: the
  // unscored tiles stay out of its sort (whose 3% ties are not transitive) and heads are kept.
  for (const auto& shape : {std::array<int64_t, 3>{214, 28672, 512}, {257, 12288, 13824}, {193, 28672, 512}}) {
    gemm::ScoreOptions off = fp8::fp8_score_options();
    off.few_rows = false;
    const auto with = fp8_scored(shape[0], shape[1], shape[2]);
    const auto without = gemm::score_candidates(shape[0], shape[1], shape[2], 132, off);
    ASSERT_EQ(with.size(), without.size()) << shape[0] << "x" << shape[1] << "x" << shape[2];
    for (size_t i = 0; i < with.size(); ++i)
      EXPECT_EQ(with[i].config.to_string(), without[i].config.to_string()) << shape[0] << "x" << shape[1] << " #" << i;
  }
}

// Split only the last wave (Fp8GemmConfig::head_cols, docs/perf.md W1 v22): parsed and printed,
// the workspace sized for the tail's tiles, candidates whose head covers the whole waves' worth of
// tile columns, none over two tile rows or fewer, and none for a family that sets `heads` false.
TEST(Fp8Config, SplitTailHead) {
  Fp8GemmConfig c;
  ASSERT_TRUE(parse_fp8_config("bn=128,splits=5,head=33", &c).ok());
  EXPECT_EQ(c.head_cols, 33);
  EXPECT_NE(c.to_string().find("head=33"), std::string::npos) << c.to_string();
  // 1024 x 4608: 8 x 36 tiles of 128; the tail is 8 x 3 tiles, split 5 ways.
  EXPECT_EQ(fp8_gemm_workspace_size(1024, 4608, 8192, c), gemm::split_k_workspace_bytes(24, 5, 128, 128));
  c.head_cols = 0;
  EXPECT_EQ(fp8_gemm_workspace_size(1024, 4608, 8192, c), gemm::split_k_workspace_bytes(288, 5, 128, 128));
  int heads = 0;
  for (const auto& cand : fp8_scored(1024, 4608, 8192)) {
    if (cand.config.head_cols == 0) continue;
    ++heads;
    const int64_t tiles_m = 8, tiles_n = (4608 + cand.config.block_n - 1) / cand.config.block_n;
    EXPECT_EQ(cand.config.head_cols, tiles_m * tiles_n / 132 * 132 / tiles_m) << cand.config.to_string();
    EXPECT_GE(cand.config.splits, 2);
    EXPECT_FALSE(cand.config.overlap || cand.config.uneven);
  }
  EXPECT_GT(heads, 0);
  for (const auto& cand : fp8_scored(256, 28672, 4096)) EXPECT_EQ(cand.config.head_cols, 0);
  gemm::ScoreOptions none = fp8::fp8_score_options();
  none.heads = false;
  for (const auto& cand : gemm::score_candidates(1024, 4608, 8192, 132, none)) EXPECT_EQ(cand.config.head_cols, 0);
}

TEST(Fp8Config, WorkspaceSize) {
  Fp8GemmConfig c;
  c.block_n = 128;
  c.splits = 1;
  EXPECT_EQ(fp8_gemm_workspace_size(128, 4096, 7168, c), 0u);
  c.splits = 4;
  // 32 tiles: the fixed counter region (shared by every call on a workspace) + 32 * 4 * 128 * 128 floats.
  EXPECT_EQ(fp8_gemm_workspace_size(128, 4096, 7168, c), 16384u + 32u * 4 * 128 * 128 * 4);
  // 64-row tiles: twice the tiles, half the partial each; the same counter region.
  c.block_m = 64;
  c.block_n = 64;
  c.splits = 2;
  EXPECT_EQ(fp8_gemm_workspace_size(128, 4096, 7168, c), 16384u + 128u * 2 * 64 * 64 * 4);
  // What no launch takes sizes nothing: block_n = 0 divided by zero, a negative M wrapped.
  c.block_n = 0;
  EXPECT_EQ(fp8_gemm_workspace_size(128, 256, 512, c), 0u);
  c.block_m = 128;
  c.block_n = 128;
  EXPECT_EQ(fp8_gemm_workspace_size(-300, 256, 512, c), 0u);
  c.splits = 0;
  EXPECT_EQ(fp8_gemm_workspace_size(128, 256, 512, c), 0u);
  // The chooser and parser refuse a null out, and the chooser a shape fp8_gemm refuses, with
  // or without a GPU (the shape check comes first).
  EXPECT_EQ(parse_fp8_config("bn=128", nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(choose_fp8_config(128, 256, 512, nullptr).code(), StatusCode::kInvalidArgument);
  Fp8GemmConfig out;
  EXPECT_EQ(choose_fp8_config(128, 40, 512, &out).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(choose_fp8_config(int64_t(1) << 40, int64_t(1) << 40, 512, &out).code(), StatusCode::kInvalidArgument);
}

// The raster walk covers every tile exactly once for every band height a caller may force,
// including bands taller than the grid; the schedule clamps the band to the grid (a forced group
// of 2^30 once overflowed the band size and left tiles unwritten; launchers now refuse it).
TEST(TileSchedule, RasterCoversEveryTileOnceForAnyGroup) {
  EXPECT_LE(lowbit::gemm::tile_schedule(300, 512, 4, 128, 128, 1, 1, (1 << 30) + 1, 132).group_m, 3);
  EXPECT_EQ(lowbit::gemm::tile_schedule(300, 512, 4, 128, 128, 1, 1, 2, 132).group_m, 2);
  EXPECT_LE(lowbit::gemm::tile_schedule(1 << 20, 512, 4, 128, 128, 1, 1, 0, 1 << 20).group_m,
            lowbit::gemm::kMaxRasterGroup);
  for (const auto& [tm, tn] : std::vector<std::pair<int, int>>{{3, 4}, {7, 5}, {1, 9}, {33, 2}, {100, 3}})
    for (int group : {1, 2, 3, 8, lowbit::gemm::kMaxRasterGroup}) {
      std::vector<int> seen(static_cast<size_t>(tm) * tn, 0);
      for (int t = 0; t < tm * tn; ++t) {
        int mb = -1, nb = -1;
        lowbit::gemm::raster_tile(t, tm, tn, group, &mb, &nb);
        ASSERT_TRUE(mb >= 0 && mb < tm && nb >= 0 && nb < tn) << tm << "x" << tn << " group " << group << " t " << t;
        ++seen[static_cast<size_t>(mb) * tn + nb];
      }
      for (int v : seen) EXPECT_EQ(v, 1) << tm << "x" << tn << " group " << group;
    }
}

// The reciprocal division is exact for every numerator a unit index can take (0 <= n < 2^31)
// and every divisor in [1, 2^31): small divisors exhaustively against small numerators, the
// edges of each, and seeded random pairs (the seed is printed).
TEST(FastDiv, ExactOnTheWholeRange) {
  std::vector<int> divisors;
  for (int d = 1; d <= 4096; ++d) divisors.push_back(d);
  for (int s = 12; s <= 30; ++s)
    for (int delta : {-1, 0, 1}) divisors.push_back((1 << s) + delta);
  divisors.push_back(INT_MAX);
  divisors.push_back(INT_MAX - 1);
  const uint64_t seed = std::random_device{}();
  std::printf("FastDiv seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 2000; ++i) divisors.push_back(static_cast<int>(rng() % INT_MAX) + 1);
  for (const int d : divisors) {
    const lowbit::FastDiv f(d);
    std::vector<int> nums = {0, 1, d - 1, d, INT_MAX, INT_MAX - 1, INT_MAX - d + 1, INT_MAX / d * d,
                             INT_MAX / d * d - 1};
    if (d <= 64)
      for (int n = 0; n < 20000; ++n) nums.push_back(n);
    for (int i = 0; i < 200; ++i) nums.push_back(static_cast<int>(rng() % (uint64_t{1} << 31)));
    for (const int n : nums) {
      if (n < 0) continue;
      ASSERT_EQ(f.div(n), n / d) << n << " / " << d;
    }
  }
}

// TileWalk (reciprocal divisions) gives exactly TileSchedule::unit's units: raster_tile's order,
// adjacent splits of one tile, balanced K ranges; partial last bands, one-row and one-band grids.
TEST(TileSchedule, WalkMatchesTheRaster) {
  for (int tm : {1, 2, 3, 7, 16, 33, 64, 100})
    for (int tn : {1, 2, 5, 33, 64})
      for (int group : {1, 2, 3, 8, 16, 63})
        for (int splits : {1, 2, 3, 7}) {
          lowbit::gemm::TileSchedule s;
          s.tiles_m = tm;
          s.tiles_n = tn;
          s.k_blocks = 37;
          s.splits = splits;
          s.group_m = std::min(group, tm);
          const auto walk = lowbit::gemm::TileWalk::of(s);
          for (int u = 0; u < s.num_units(); ++u) {
            const auto w = walk.unit(s, u);
            const auto e = s.unit(u);
            const std::string at = std::to_string(tm) + "x" + std::to_string(tn) + " group " + std::to_string(group) +
                                   " splits " + std::to_string(splits) + " u " + std::to_string(u);
            ASSERT_EQ(w.tile, e.tile) << at;
            ASSERT_EQ(w.split, e.split) << at;
            ASSERT_EQ(w.m_block, e.m_block) << at;
            ASSERT_EQ(w.n_block, e.n_block) << at;
            ASSERT_EQ(w.kb_begin, e.kb_begin) << at;
            ASSERT_EQ(w.kb_end, e.kb_end) << at;
          }
        }
}

// StreamKWalk deals out every tail K block exactly once, in runs of q or q + 1 per lane, each CTA's
// units as its loop walks them (b, b + grid, ... up to end_unit(b)); whole tiles ahead of the tail,
// whole waves of the lanes; the CTAs of a lane walk the same stacks and K ranges, one row each
// (in step: the tiles of a column read B together); each tile's pieces numbered 0 ... parts - 1 in
// K order, and their workspace slots (first_slot + split) distinct and below partial_slots. One
// band (stacks of tiles_m rows) and several (single tiles), tails with fewer K blocks than lanes,
// one CTA, one K block, grids that leave CTAs idle.
TEST(TileSchedule, StreamKWalkCoversEveryKBlockOnce) {
  using lowbit::gemm::StreamKWalk;
  for (int tm : {1, 2, 3, 7})
    for (int tn : {1, 5, 33})
      for (int kb : {1, 2, 3, 37, 108})
        for (int grid : {1, 3, 7, 132, 200})
          for (int group : {3, 7})
            for (int sk = 1; sk <= 2; ++sk) {
              lowbit::gemm::TileSchedule s;
              s.tiles_m = tm;
              s.tiles_n = tn;
              s.k_blocks = kb;
              s.group_m = std::min(group, tm);
              const int tiles = s.num_tiles();
              const auto walk = lowbit::gemm::TileWalk::of(s);
              const auto w = StreamKWalk::of(s, grid, sk);
              const std::string at = std::to_string(tm) + "x" + std::to_string(tn) + " kb " + std::to_string(kb) +
                                     " grid " + std::to_string(grid) + " group " + std::to_string(group) + " sk " +
                                     std::to_string(sk);
              ASSERT_EQ(w.rows, s.group_m == tm && tm > 1 && tm <= grid ? tm : 1) << at;
              ASSERT_EQ(w.lanes, grid / w.rows) << at;
              ASSERT_EQ(w.head_stacks % w.lanes, 0) << at;
              ASSERT_EQ((w.head_stacks + w.tail_stacks) * w.rows, tiles) << at;
              const int head = w.head_stacks * w.rows;
              const int64_t slots = w.partial_slots();
              std::vector<int> covered(static_cast<size_t>(tiles) * kb, 0);
              std::vector<int> pieces(tiles, 0), parts(tiles, 0), next_kb(tiles, 0);
              std::vector<int> slot_used(static_cast<size_t>(std::max<int64_t>(slots, 1)), 0);
              std::vector<std::vector<std::array<int, 3>>> walked(grid);  // (stack, kb_begin, kb_end) per CTA
              for (int b = 0; b < grid; ++b) {
                int run = 0;
                for (int u = b; u < w.end_unit(b); u += grid) {
                  const auto unit = w.unit(s, walk, u);
                  const bool whole = unit.parts == 1 && unit.kb_begin == 0 && unit.kb_end == kb;
                  int mb = 0, nb = 0;
                  int tile = -1;
                  for (int t = 0; t < tiles && tile < 0; ++t) {
                    lowbit::gemm::raster_tile(t, tm, tn, s.group_m, &mb, &nb);
                    if (mb == unit.m_block && nb == unit.n_block) tile = t;
                  }
                  ASSERT_GE(tile, 0) << at << " u " << u;
                  ASSERT_EQ(tile % w.rows, b % w.rows) << at << ": CTA " << b << " left its row";
                  ASSERT_LT(unit.kb_begin, unit.kb_end) << at << " u " << u;
                  walked[b].push_back({tile / w.rows, unit.kb_begin, unit.kb_end});
                  if (tile < head) {
                    ASSERT_TRUE(whole) << at;
                    ASSERT_EQ(unit.parts, 1) << at;
                  } else {
                    ASSERT_EQ(unit.tile, tile - head) << at;
                    run += unit.kb_end - unit.kb_begin;
                    // Pieces of a tile come in K order, so split s starts where s - 1 ended.
                    ASSERT_EQ(unit.split, pieces[tile]) << at;
                    ASSERT_EQ(unit.kb_begin, next_kb[tile]) << at;
                    next_kb[tile] = unit.kb_end;
                    ++pieces[tile];
                    ASSERT_TRUE(parts[tile] == 0 || parts[tile] == unit.parts) << at;
                    parts[tile] = unit.parts;
                    if (unit.parts > 1) {
                      const int64_t slot = StreamKWalk::first_slot(unit) + unit.split;
                      ASSERT_GE(slot, 0) << at;
                      ASSERT_LT(slot, slots) << at;
                      ASSERT_EQ(slot_used[slot]++, 0) << at << ": slot " << slot << " taken twice";
                    }
                  }
                  for (int x = unit.kb_begin; x < unit.kb_end; ++x) ++covered[static_cast<size_t>(tile) * kb + x];
                }
                if (w.tail_stacks > 0 && b < w.lanes * w.rows) {
                  const int64_t tail = static_cast<int64_t>(w.tail_stacks) * kb;
                  ASSERT_TRUE(run == tail / w.lanes || run == tail / w.lanes + 1) << at << " CTA " << b << " run " << run;
                }
              }
              for (int b = 0; b < grid; ++b)  // a lane's rows walk the same stacks and K ranges
                ASSERT_EQ(walked[b], walked[b - b % w.rows]) << at << " CTA " << b;
              for (size_t x = 0; x < covered.size(); ++x) ASSERT_EQ(covered[x], 1) << at << " K block " << x;
              for (int t = head; t < tiles; ++t) ASSERT_EQ(pieces[t], parts[t]) << at << " tile " << t;
            }
}

// The compiled kernels are the lines of gemm/fp8/variants.def: each is found as itself (no two
// lines describe one kernel) and the compiled-config rule says yes to each, no to a neighbour
// that is not a line (the 256-wide tile has no fused kernel).
TEST(Fp8Config, VariantTableIsTheCompiledRule) {
  using namespace lowbit::fp8;
  ASSERT_GT(kNumFp8VariantSpecs, 0);
  for (int i = 0; i < kNumFp8VariantSpecs; ++i) {
    const Fp8VariantSpec& s = kFp8VariantSpecs[i];
    EXPECT_EQ(find_fp8_variant(s.block_m, s.block_n, s.out, s.epilogue, s.cluster, s.promote_every, s.resident_rows > 0,
                               s.overlap, s.uneven, s.cluster_splits, s.stream_k),
              i)
        << "line " << i << ": " << s.reason;
    // A kernel that splits within a cluster has its workspace twin (the transport a forced
    // creduce=0 runs, and every split count past its own).
    if (s.cluster_splits > 0) {
      EXPECT_GE(s.cluster_splits, 2) << s.reason;
      EXPECT_GE(find_fp8_variant(s.block_m, s.block_n, s.out, s.epilogue, s.cluster, s.promote_every,
                                 s.resident_rows > 0, s.overlap, s.uneven),
                0)
          << "line " << i << ": " << s.reason;
    }
    int stages = 0;
    EXPECT_TRUE(fp8_variant_exists(s.block_m, s.block_n, &stages)) << s.reason;
    Fp8GemmConfig c;
    c.block_m = s.block_m;
    c.block_n = s.block_n;
    c.cluster = s.cluster;
    c.promote_every = s.promote_every;
    c.resident_rows = s.resident_rows > 0;
    c.overlap = s.overlap;
    c.uneven = s.uneven;
    c.stream_k = s.stream_k ? 1 : 0;
    const Fp8EpilogueKind kind = s.epilogue == VariantEpilogue::kFused    ? Fp8EpilogueKind::kFused
                                 : s.epilogue == VariantEpilogue::kStaged ? Fp8EpilogueKind::kBias
                                                                         : Fp8EpilogueKind::kPlain;
    EXPECT_TRUE(fp8_config_compiled(c, kind, s.out == OutType::kFP32, s.out == OutType::kFP16)) << s.reason;
    EXPECT_NE(std::string(s.reason), "");
  }
  Fp8GemmConfig wide;
  wide.block_n = 256;
  EXPECT_FALSE(fp8_config_compiled(wide, Fp8EpilogueKind::kFused));
  EXPECT_NE(compiled_variants_text(128, 256).find("BF16 plain promote=2 overlap=1 uneven=1"), std::string::npos)
      << compiled_variants_text(128, 256);
}

// The last partial wave cut along K (gemm/core/tail_plan.h): every tile's K blocks covered once by
// its parts, in order, each part at least max(min_part, 1) K blocks; and, by a simulation of the
// persistent grid (CTA c takes units c, c + grid, ...; a unit costs its K blocks plus
// kTailPartCostKBlocks), the chosen parts never end later than whole tiles and are within a K block
// of the best count that the minimum allows.
TEST(TailPlan, CoversEveryTileOnceAndEndsTheLastWaveSoonest) {
  for (int x = 0; x < (1 << 15); ++x)
    for (int d = 1; d <= 4; ++d) ASSERT_EQ(gemm::div_small(x, d), x / d) << x << " / " << d;
  auto makespan = [](int tiles, int grid, int kblocks, int whole, int parts) {
    const int units = whole + (tiles - whole) * parts;
    std::vector<long> busy(static_cast<size_t>(grid), 0);
    for (int u = 0; u < units; ++u) {
      int b = 0, e = 0;
      gemm::tail_plan_unit(u, whole, parts, kblocks, &b, &e);
      busy[static_cast<size_t>(u % grid)] += e - b + gemm::kTailPartCostKBlocks;
    }
    return busy.empty() ? 0L : *std::max_element(busy.begin(), busy.end());
  };
  for (int min_part : {0, 1, 3, 16}) {
    for (int grid : {0, 1, 2, 3, 5, 7, 60, 114, 132}) {
      for (int kblocks : {1, 2, 3, 4, 5, 16, 31, 32, 56, 4096}) {
        for (int tiles = 0; tiles <= 3 * 132 + 7; ++tiles) {
          const gemm::TailPlan p = gemm::tail_plan(tiles, grid, kblocks, min_part);
          const std::string what = "tiles " + std::to_string(tiles) + " grid " + std::to_string(grid) + " kblocks " +
                                   std::to_string(kblocks) + " min_part " + std::to_string(min_part);
          const int tail = tiles - p.whole;
          ASSERT_TRUE(p.parts >= 1 && p.parts <= 4 && p.parts <= kblocks) << what;
          // Every part holds at least min_part K blocks (the parts' sizes differ by one at most).
          if (p.parts > 1) {
            ASSERT_GE(kblocks / p.parts, std::max(min_part, 1)) << what;
          }
          ASSERT_EQ(p.units, p.whole + tail * p.parts) << what;
          if (grid == 0) {
            EXPECT_EQ(p.whole, tiles) << what;
            EXPECT_EQ(p.parts, 1) << what;
          } else {
            EXPECT_EQ(p.whole % grid, 0) << what;
            EXPECT_TRUE(tail >= 0 && tail < grid) << what;
            if (tail == 0) {
              EXPECT_EQ(p.parts, 1) << what;
            }
            if (kblocks <= 56) {  // the simulation, where it is quick
              const long chosen = makespan(tiles, grid, kblocks, p.whole, p.parts);
              EXPECT_LE(chosen, makespan(tiles, grid, kblocks, p.whole, 1)) << what;
              for (int q = 2; q <= 4 && q * std::max(min_part, 1) <= kblocks; ++q)
                EXPECT_LE(chosen, makespan(tiles, grid, kblocks, p.whole, q) + 1) << what << " parts " << q;
            }
          }
          // Each tile's K blocks, from its units in order: contiguous, non-empty, all of them.
          std::vector<int> next_kb(static_cast<size_t>(tiles), 0);
          for (int u = 0; u < p.units; ++u) {
            int b = -1, e = -1;
            const int t = gemm::tail_plan_unit(u, p.whole, p.parts, kblocks, &b, &e);
            ASSERT_TRUE(t >= 0 && t < tiles) << what << " unit " << u;
            ASSERT_EQ(b, next_kb[static_cast<size_t>(t)]) << what << " unit " << u;
            ASSERT_LT(b, e) << what << " unit " << u;
            next_kb[static_cast<size_t>(t)] = e;
          }
          for (int t = 0; t < tiles; ++t) ASSERT_EQ(next_kb[static_cast<size_t>(t)], kblocks) << what << " tile " << t;
        }
      }
    }
  }
  // Past the quotients' range (a forced grid of 2^13 CTAs or more, or K of 2^20): whole tiles only.
  EXPECT_EQ(gemm::tail_plan(8192 + 5, 100000, 56, 1).parts, 1);
  EXPECT_EQ(gemm::tail_plan(5, 132, 8192, 1).parts, 1);
  EXPECT_EQ(gemm::tail_plan(5, 132, 8191, 1).parts, 4);
  EXPECT_EQ(gemm::tail_plan(5, 132, 8191, 8191).parts, 1);
  // The auto minimum (16 K blocks): k = 2048 (16 blocks) is never cut; k = 7168 (56) in two parts
  // where the tail fits one round, and never in four (14 blocks each).
  EXPECT_EQ(gemm::tail_plan(1248, 132, 16, 16).parts, 1);
  EXPECT_EQ(gemm::tail_plan(1248, 132, 56, 16).parts, 2);
  for (int tiles = 1188; tiles < 1188 + 132; ++tiles) EXPECT_LE(gemm::tail_plan(tiles, 132, 56, 16).parts, 3) << tiles;
}
