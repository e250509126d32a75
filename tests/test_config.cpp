#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "gemm/fp8/config.h"
#include "gemm/fp8/variants.h"
#include "gemm/tile_scheduler.cuh"
#include "lowbit/gemm.h"

using namespace lowbit;

TEST(Fp8Config, ParsesAndRejects) {
  Fp8GemmConfig c;
  ASSERT_TRUE(parse_fp8_config("bn=64,splits=3,group=4,grid=100", &c).ok());
  EXPECT_EQ(c.block_n, 64);
  EXPECT_EQ(c.splits, 3);
  EXPECT_EQ(c.raster_group, 4);
  EXPECT_EQ(c.grid, 100);
  EXPECT_EQ(c.stages, fp8::fp8_stages_for(64));
  EXPECT_FALSE(parse_fp8_config("bn=96", &c).ok());
  EXPECT_FALSE(parse_fp8_config("bn=128,foo=1", &c).ok());
  EXPECT_FALSE(parse_fp8_config("bn=abc", &c).ok());
  EXPECT_FALSE(parse_fp8_config("bn=128,stages=3", &c).ok());
}

TEST(Fp8Config, StagesFitSharedMemory) {
  for (const auto& v : fp8::kFp8Variants) {
    EXPECT_GE(v.stages, 4) << v.block_n;
    EXPECT_LE(v.stages * (16384 + v.block_n * 128) + 32768 + 2048 + v.block_n * 2, 232448) << v.block_n;
    // Fused variants also hold the staged row-broadcast tile; 3 stages still overlap TMA and MMA.
    // A tile width too wide for that has none (fused_stages 0); the narrower ones must.
    if (v.fused_stages == 0) {
      EXPECT_GE(v.block_n, 256) << "only the widest tile may lack a fused variant";
      continue;
    }
    EXPECT_GE(v.fused_stages, 3) << v.block_n;
    EXPECT_LT(v.fused_stages, v.stages) << v.block_n;
    EXPECT_LE(v.fused_stages * (16384 + v.block_n * 128) + 32768 + 2048 + v.block_n * 2 +
                  fp8::fp8_row_operand_bytes(v.block_n),
              232448)
        << v.block_n;
  }
}

TEST(Fp8Config, ChooserCoversEveryBenchShape) {
  const int64_t shapes[][3] = {{4096, 8192, 8192}, {8192, 8192, 8192}, {64, 2112, 7168}, {128, 7168, 16384},
                               {4096, 32768, 512}, {1, 16, 16}, {3, 48, 144}};
  for (const auto& s : shapes) {
    const auto cands = fp8::score_fp8_candidates(s[0], s[1], s[2], 132);
    ASSERT_FALSE(cands.empty());
    const auto& best = cands.front().config;
    EXPECT_GE(best.splits, 1);
    EXPECT_LE(best.splits, fp8::fp8_k_blocks(s[2]));
    EXPECT_FALSE(best.reason.empty());
    for (size_t i = 1; i < cands.size(); ++i) EXPECT_GT(cands[i].t_total_us, 0.0);
  }
  // Small M with few tiles should split K to occupy the SMs.
  const auto small = fp8::score_fp8_candidates(128, 4096, 7168, 132);
  EXPECT_GT(small.front().config.splits * fp8::fp8_tiles(128, 4096, small.front().config.block_n), 64);
  EXPECT_NE(explain_fp8_config(128, 4096, 7168).find("candidates"), std::string::npos);
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
  EXPECT_FALSE(fp8::fp8_config_compiled(c, Fp8EpilogueKind::kBias));
  EXPECT_FALSE(fp8::fp8_config_compiled(c, Fp8EpilogueKind::kFused));
  c.cluster = 2;
  EXPECT_FALSE(fp8::fp8_config_compiled(c, Fp8EpilogueKind::kPlain));
  ASSERT_TRUE(parse_fp8_config("bn=64,promote=2", &c).ok());
  EXPECT_FALSE(fp8::fp8_config_compiled(c, Fp8EpilogueKind::kPlain));
  ASSERT_TRUE(parse_fp8_config("bn=128,promote=3", &c).ok());
  EXPECT_FALSE(fp8::fp8_config_compiled(c, Fp8EpilogueKind::kPlain));
  EXPECT_EQ(fp8::fp8_promotion_groups(16, 2), 1);
  EXPECT_EQ(fp8::fp8_promotion_groups(384, 2), 2);  // 3 K blocks: a pair and a padded pair
  EXPECT_EQ(fp8::fp8_promotion_groups(512, 2), 2);
  EXPECT_EQ(fp8::fp8_promotion_groups(384, 1), 3);

  const auto big = fp8::score_fp8_candidates(4096, 8192, 8192, 132);
  EXPECT_EQ(big.front().config.promote_every, 2) << big.front().config.to_string();
  // Memory-bound: the promotion interval changes no byte, so the tie goes to per-block promotion.
  const auto small = fp8::score_fp8_candidates(64, 7168, 16384, 132);
  EXPECT_EQ(small.front().config.promote_every, 1) << small.front().config.to_string();
  for (const auto& cand : big) {
    if (cand.config.promote_every == 2) {
      EXPECT_TRUE(fp8::fp8_config_compiled(cand.config, Fp8EpilogueKind::kPlain));
    }
  }
}

TEST(Fp8Config, WorkspaceSize) {
  Fp8GemmConfig c;
  c.block_n = 128;
  c.splits = 1;
  EXPECT_EQ(fp8_gemm_workspace_size(128, 4096, 7168, c), 0u);
  c.splits = 4;
  // 32 tiles: 256 bytes of counters + 32 * 4 * 128 * 128 floats.
  EXPECT_EQ(fp8_gemm_workspace_size(128, 4096, 7168, c), 256u + 32u * 4 * 128 * 128 * 4);
}

// The stream-K tail, checked as a property over many shapes and grids: every (tile, K block) is
// computed by exactly one unit; the units of a tile agree on how it is summed (parts, counter,
// first slot) and number themselves 0..parts-1; no two parts share a workspace slot; counters and
// slots stay inside what the workspace holds; and every CTA gets the same number of K blocks,
// to within one (the point of the tail).
TEST(TileSchedule, StreamKTailCoversEveryBlockOnce) {
  struct Case { int tiles_m, tiles_n, k_blocks, grid; };
  const Case cases[] = {{32, 32, 32, 132}, {64, 32, 32, 132}, {32, 33, 32, 132}, {3, 5, 7, 4},  {1, 1, 9, 4},
                        {1, 3, 1, 4},      {2, 3, 1, 7},      {5, 7, 64, 12},   {32, 28, 64, 132}, {11, 13, 3, 16},
                        {4, 4, 2, 3},      {1, 200, 5, 132},  {7, 7, 1, 5}};
  for (const Case& cs : cases) {
    gemm::TileSchedule s;
    s.tiles_m = cs.tiles_m;
    s.tiles_n = cs.tiles_n;
    s.k_blocks = cs.k_blocks;
    s.group_m = 4;
    s.set_stream_k(cs.grid);
    const int tiles = s.num_tiles();
    SCOPED_TRACE(::testing::Message() << cs.tiles_m << "x" << cs.tiles_n << " tiles, " << cs.k_blocks
                                      << " K blocks, grid " << cs.grid);
    if (tiles % cs.grid == 0) {
      EXPECT_EQ(s.sk_chunks, 0) << "no partial wave: nothing to share";
      continue;
    }
    ASSERT_GT(s.sk_chunks, 0);
    EXPECT_EQ(s.dp_tiles % cs.grid, 0);
    std::vector<int> covered(static_cast<size_t>(tiles) * cs.k_blocks, 0);
    std::vector<int> per_cta(cs.grid, 0);
    std::map<int, std::vector<gemm::FixUp>> parts_of_tile;
    std::set<int> slots;
    for (int u = 0; u < s.num_units(); ++u) {
      const gemm::WorkUnit w = s.unit(u);
      if (w.empty()) continue;
      ASSERT_GE(w.kb_begin, 0);
      ASSERT_LE(w.kb_end, cs.k_blocks);
      ASSERT_GE(w.tile, 0);
      ASSERT_LT(w.tile, tiles);
      int mb = 0, nb = 0;
      gemm::raster_tile(w.tile, s.tiles_m, s.tiles_n, s.group_m, &mb, &nb);
      EXPECT_EQ(mb, w.m_block);
      EXPECT_EQ(nb, w.n_block);
      for (int kb = w.kb_begin; kb < w.kb_end; ++kb) ++covered[static_cast<size_t>(w.tile) * cs.k_blocks + kb];
      per_cta[u % cs.grid] += w.kb_end - w.kb_begin;
      const gemm::FixUp f = s.fixup(u);
      if (w.tile < s.dp_tiles) {
        EXPECT_EQ(f.parts, 1);
        EXPECT_EQ(w.kb_end - w.kb_begin, cs.k_blocks);
        continue;
      }
      ASSERT_GE(f.parts, 1);
      EXPECT_GE(f.part, 0);
      EXPECT_LT(f.part, f.parts);
      EXPECT_EQ(f.counter, w.tile - s.dp_tiles);
      EXPECT_LT(f.counter, s.fixup_counters());
      EXPECT_LT(f.slot0 + f.part, s.fixup_slots());
      EXPECT_TRUE(slots.insert(f.slot0 + f.part).second) << "slot " << f.slot0 + f.part << " taken twice";
      parts_of_tile[w.tile].push_back(f);
    }
    for (size_t i = 0; i < covered.size(); ++i)
      ASSERT_EQ(covered[i], 1) << "tile " << i / cs.k_blocks << " K block " << i % cs.k_blocks;
    for (const auto& [tile, fs] : parts_of_tile) {
      std::set<int> idx;
      for (const auto& f : fs) {
        EXPECT_EQ(f.parts, static_cast<int>(fs.size())) << "tile " << tile;
        EXPECT_EQ(f.slot0, fs[0].slot0);
        EXPECT_EQ(f.counter, fs[0].counter);
        idx.insert(f.part);
      }
      EXPECT_EQ(static_cast<int>(idx.size()), static_cast<int>(fs.size())) << "tile " << tile;
    }
    const auto [lo, hi] = std::minmax_element(per_cta.begin(), per_cta.end());
    EXPECT_LE(*hi - *lo, 1) << "K blocks per CTA " << *lo << ".." << *hi;
  }
}

TEST(Fp8Config, StreamK) {
  Fp8GemmConfig c;
  ASSERT_TRUE(parse_fp8_config("bn=256,promote=2,streamk=1,grid=132", &c).ok());
  EXPECT_EQ(c.stream_k, 1);
  EXPECT_NE(c.to_string().find("streamk=1"), std::string::npos);
  // 4096 x 8192 in 128 x 256 tiles: 1024 tiles = 7 waves of 132 + 100; the tail's 100 x 32
  // promotion groups shared by 132 CTAs. 100 counters (256-byte padded to 512), 100 + 131 slots.
  EXPECT_EQ(fp8_gemm_workspace_size(4096, 8192, 8192, c), 512u + 231u * 128 * 256 * 4);
  // 1056 tiles = exactly 8 waves: no tail, no workspace.
  EXPECT_EQ(fp8_gemm_workspace_size(4096, 8448, 8192, c), 0u);
  // The chooser scores a stream-K candidate next to each whole-tile one with a partial last wave.
  const auto cands = fp8::score_fp8_candidates(4096, 8192, 8192, 132);
  bool found = false;
  for (const auto& cand : cands) found |= cand.config.stream_k == 1 && cand.config.block_n == 256;
  EXPECT_TRUE(found);
}
