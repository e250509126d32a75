// Bad input returns a Status with a message before anything touches the GPU, so these run
// everywhere.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "lowbit/blockscaled.h"
#include "lowbit/device.h"
#include "lowbit/gemm.h"
#include "lowbit/moe.h"
#include "lowbit/patch_embed.h"

using namespace lowbit;

namespace {

Fp8GemmArgs valid_args() {
  Fp8GemmArgs a;
  a.m = 128;
  a.n = 256;
  a.k = 512;
  a.a = reinterpret_cast<const void*>(0x100000000);
  a.b = reinterpret_cast<const void*>(0x200000000);
  a.d = reinterpret_cast<void*>(0x300000000);
  return a;
}

void expect_invalid(const Fp8GemmArgs& a, const char* needle) {
  const Status st = fp8_gemm(a, nullptr);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  EXPECT_NE(st.message().find(needle), std::string::npos) << st.message();
}

}  // namespace

TEST(Fp8Validation, RejectsBadShapes) {
  auto a = valid_args();
  a.m = 0;
  expect_invalid(a, "M must be");
  a = valid_args();
  a.m = -5;
  expect_invalid(a, "M must be");
  a = valid_args();
  a.n = 40;
  expect_invalid(a, "N must be");
  a = valid_args();
  a.k = 24;
  expect_invalid(a, "K must be");
  a = valid_args();
  a.k = 0;
  expect_invalid(a, "K must be");
  a = valid_args();
  a.m = int64_t(1) << 32;
  expect_invalid(a, "M must be at most 2^31 - 257");
  // Each dimension fits, the tile count would not (2^30 units at most per launch).
  a = valid_args();
  a.m = int64_t(1) << 26;
  a.n = int64_t(1) << 26;
  expect_invalid(a, "2^40");
}

TEST(Fp8Validation, RejectsBadPointers) {
  auto a = valid_args();
  a.a = nullptr;
  expect_invalid(a, "A must be non-null");
  a = valid_args();
  a.d = nullptr;
  expect_invalid(a, "D must be non-null");
  a = valid_args();
  a.b = reinterpret_cast<const void*>(0x200000008);
  expect_invalid(a, "B must be 16-byte aligned");
  a = valid_args();
  a.bias = reinterpret_cast<const void*>(0x400000002);
  expect_invalid(a, "bias must be 16-byte aligned");
  a = valid_args();
  a.a_scale = reinterpret_cast<const float*>(0x400000002);
  expect_invalid(a, "a_scale must be 4-byte aligned");
  a = valid_args();
  a.workspace_bytes = 1024;
  expect_invalid(a, "null workspace");
}

// Per-row scales: 4-byte aligned, and not with the fused epilogue's steps (checked on the host,
// before any pointer is looked at).
TEST(Fp8Validation, RejectsBadRowScales) {
  auto a = valid_args();
  a.a_row_scale = reinterpret_cast<const float*>(0x400000002);
  expect_invalid(a, "a_row_scale must be 4-byte aligned");
  a = valid_args();
  a.b_row_scale = reinterpret_cast<const float*>(0x400000001);
  expect_invalid(a, "b_row_scale must be 4-byte aligned");
  a = valid_args();
  a.a_row_scale = reinterpret_cast<const float*>(0x400000000);
  a.activation = Activation::kGelu;
  expect_invalid(a, "not with row_bcast or an activation");
  a = valid_args();
  a.out_type = OutType::kFP16;
  a.row_bcast = reinterpret_cast<const void*>(0x500000000);
  a.row_bcast_rows = 4;
  expect_invalid(a, "not with row_bcast or an activation");
}

// An out_type outside the enum picked the BF16 kernel and returned Ok.
TEST(Fp8Validation, RejectsUnknownOutType) {
  auto a = valid_args();
  a.out_type = static_cast<OutType>(5);
  expect_invalid(a, "out_type");
}

TEST(Fp8Validation, NoHopperGivesUnsupportedDevice) {
  DeviceInfo d;
  if (require_hopper(&d).ok()) GTEST_SKIP() << "a Hopper GPU is present: this test covers machines without one";
  const Status st = fp8_gemm(valid_args(), nullptr);
  EXPECT_EQ(st.code(), StatusCode::kUnsupportedDevice) << st.to_string();
  EXPECT_FALSE(st.message().empty());
}

TEST(Fp8Validation, RejectsBadEpilogueArguments) {
  auto a = valid_args();
  a.row_bcast = reinterpret_cast<const void*>(0x500000000);
  a.row_bcast_rows = 0;
  expect_invalid(a, "row_bcast_rows must be >= 1");
  a.row_bcast_rows = -3;
  expect_invalid(a, "row_bcast_rows must be >= 1");
  a.row_bcast_rows = 196;
  a.row_bcast = reinterpret_cast<const void*>(0x500000008);
  expect_invalid(a, "row_bcast must be 16-byte aligned");
  a = valid_args();
  a.row_bcast_rows = 196;
  expect_invalid(a, "without a row_bcast tensor");
  a = valid_args();
  a.residual = reinterpret_cast<const void*>(0x600000004);
  expect_invalid(a, "residual must be 16-byte aligned");
  a = valid_args();
  a.activation = static_cast<Activation>(7);
  expect_invalid(a, "unknown activation");
}

TEST(PatchEmbedValidation, RejectsBadInput) {
  PatchEmbedArgs a;
  a.m = 196 * 4;
  a.n = 768;
  a.k = 768;
  a.patches = reinterpret_cast<const void*>(0x100000000);
  a.weight = reinterpret_cast<const void*>(0x200000000);
  a.out = reinterpret_cast<void*>(0x300000000);
  a.bias = reinterpret_cast<const void*>(0x400000000);
  a.bias_len = 768;
  a.pos = reinterpret_cast<const void*>(0x500000000);
  a.pos_rows = 196;
  a.pos_cols = 768;
  auto expect = [](const PatchEmbedArgs& x, const char* needle) {
    const Status st = patch_embed_fp8(x, nullptr);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
    EXPECT_NE(st.message().find(needle), std::string::npos) << st.message();
  };
  auto b = a;
  b.pos_rows = 0;
  expect(b, "pos_rows (P) must be >= 1");
  b = a;
  b.whole_images = false;
  b.pos_rows = int64_t(1) << 31;
  expect(b, "pos_rows (P) must be at most 2^31 - 1");
  b = a;
  b.m = 196 * 4 + 1;
  expect(b, "not a multiple of P");
  b = a;
  b.bias_len = 512;
  expect(b, "bias has 512 entries");
  b = a;
  b.pos_cols = 512;
  expect(b, "pos has 512 columns");
  b = a;
  b.pos = nullptr;
  expect(b, "patch_embed_fp8: pos must be non-null");
  b = a;
  b.bias = reinterpret_cast<const void*>(0x400000004);
  expect(b, "patch_embed_fp8: bias must be 16-byte aligned");
  b = a;
  b.pos = reinterpret_cast<const void*>(0x500000002);
  expect(b, "patch_embed_fp8: pos must be 16-byte aligned");
  // The GEMM's shape rules, under this entry point's name.
  b = a;
  b.k = 24;
  expect(b, "patch_embed_fp8: K must be");
  // Allowed when the caller does not require whole images. Checked only without a Hopper GPU,
  // where the call then stops at the device check: with one it would launch on the fake
  // addresses above.
  b = a;
  b.whole_images = false;
  b.m = 196 * 4 + 1;
  if (!require_hopper().ok()) {
    EXPECT_EQ(patch_embed_fp8(b, nullptr).code(), StatusCode::kUnsupportedDevice);
  }
}

// ---------------------------------------------------------------- block-scaled and grouped
namespace {

Fp8BlockScaledArgs valid_blockscaled() {
  Fp8BlockScaledArgs a;
  a.m = 100;
  a.n = 256;
  a.k = 512;
  a.a = reinterpret_cast<const void*>(0x100000000);
  a.b = reinterpret_cast<const void*>(0x200000000);
  a.d = reinterpret_cast<void*>(0x300000000);
  a.sfa = reinterpret_cast<const float*>(0x400000000);
  a.sfa_ld = 100;
  a.sfb = reinterpret_cast<const float*>(0x500000000);
  return a;
}

void expect_invalid_bs(const Fp8BlockScaledArgs& a, const char* needle) {
  const Status st = fp8_blockscaled_gemm(a, nullptr);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  EXPECT_NE(st.message().find(needle), std::string::npos) << st.message();
}

Fp8GroupedProblem valid_group() {
  return Fp8GroupedProblem{64, 128, 256, 0, reinterpret_cast<const void*>(0x100000000),
                           reinterpret_cast<const void*>(0x200000000), reinterpret_cast<void*>(0x300000000),
                           reinterpret_cast<const float*>(0x400000000), reinterpret_cast<const float*>(0x500000000), 64};
}

}  // namespace

TEST(BlockScaledValidation, RejectsBadDenseArguments) {
  auto a = valid_blockscaled();
  a.m = 0;
  expect_invalid_bs(a, "M must be");
  a = valid_blockscaled();
  a.n = 40;
  expect_invalid_bs(a, "N must be");
  a = valid_blockscaled();
  a.k = 8;
  expect_invalid_bs(a, "K must be");
  a = valid_blockscaled();
  a.sfb = nullptr;
  expect_invalid_bs(a, "non-null");
  a = valid_blockscaled();
  a.sfa = reinterpret_cast<const float*>(0x400000004);
  expect_invalid_bs(a, "16-byte aligned");
  a = valid_blockscaled();
  a.sfa_ld = 96;
  expect_invalid_bs(a, "sfa_ld");
  a = valid_blockscaled();
  a.sfa_ld = 102;
  expect_invalid_bs(a, "sfa_ld");
  a = valid_blockscaled();
  BlockScaledConfig c;
  c.raster_group = 0;
  const Status st = fp8_blockscaled_gemm(a, nullptr, &c);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  c = BlockScaledConfig{};
  c.cluster = 3;
  const Status triple = fp8_blockscaled_gemm(a, nullptr, &c);
  EXPECT_EQ(triple.code(), StatusCode::kInvalidArgument) << triple.to_string();
}

TEST(BlockScaledValidation, ParsesConfig) {
  BlockScaledConfig c;
  ASSERT_TRUE(parse_blockscaled_config("grid=66,group=4,cluster=1", &c).ok());
  EXPECT_EQ(c.grid, 66);
  EXPECT_EQ(c.raster_group, 4);
  EXPECT_EQ(c.cluster, 1);
  EXPECT_EQ(c.block_n, 0);  // auto
  ASSERT_TRUE(parse_blockscaled_config("bn=256", &c).ok());
  EXPECT_EQ(c.block_n, 256);
  EXPECT_EQ(c.cluster, 0);
  // Widths between whole scale blocks straddle two (192, 144; 64-row 48, 80); 176 could reach a
  // third, 96 is not compiled: refused with the compiled widths.
  ASSERT_TRUE(parse_blockscaled_config("bn=192", &c).ok());
  EXPECT_EQ(c.block_n, 192);
  ASSERT_TRUE(parse_blockscaled_config("bm=64,bn=80", &c).ok());
  EXPECT_EQ(c.block_n, 80);
  for (const char* bad : {"bn=176", "bn=96", "bn=100"}) {
    const Status st = parse_blockscaled_config(bad, &c);
    EXPECT_FALSE(st.ok()) << bad;
    EXPECT_NE(st.message().find("compiled width: 32 48 64 80 128 144 192 256"), std::string::npos)
        << st.to_string();
  }
  // Dense tiles of the GEMM core: 64 columns (inside one scale block), 64 rows, split-K.
  ASSERT_TRUE(parse_blockscaled_config("bm=64,bn=64,splits=4", &c).ok());
  EXPECT_EQ(c.block_m, 64);
  EXPECT_EQ(c.block_n, 64);
  EXPECT_EQ(c.splits, 4);
  EXPECT_FALSE(parse_blockscaled_config("bm=32", &c).ok());
  EXPECT_FALSE(parse_blockscaled_config("splits=-1", &c).ok());
  // Forced splits with the tile left open: enough for the widest tile the chooser may take (at
  // N = 384 a 256-wide tile pads to 512 columns, a 128-wide one to 384). No GPU needed.
  BlockScaledConfig open_tile;
  open_tile.splits = 2;
  BlockScaledConfig wide;
  wide.splits = 2;
  wide.block_n = 256;
  EXPECT_GE(fp8_blockscaled_workspace_size(1000, 384, 4096, &open_tile),
            fp8_blockscaled_workspace_size(1000, 384, 4096, &wide));
  EXPECT_GT(fp8_blockscaled_workspace_size(1000, 384, 4096, &wide), 0u);
  // Every compiled dense tile, split two ways, asks for its partial tiles: a tile only the
  // block-scaled table has (144 wide, 64 x 32) once got 0 bytes and wrote past the workspace.
  for (const char* text : {"bm=64,bn=32", "bm=64,bn=48", "bm=64,bn=64", "bm=64,bn=80", "bn=64", "bn=128", "bn=144",
                           "bn=192", "bn=256"}) {
    BlockScaledConfig t;
    ASSERT_TRUE(parse_blockscaled_config(text, &t).ok()) << text;
    t.splits = 2;
    const int bm = t.block_m ? t.block_m : 128;
    const size_t tiles = static_cast<size_t>((1000 + bm - 1) / bm) * ((400 + t.block_n - 1) / t.block_n);
    EXPECT_GE(fp8_blockscaled_workspace_size(1000, 400, 4096, &t), tiles * 2 * bm * t.block_n * sizeof(float)) << text;
  }
  // The block-scaled kernels run single CTAs (multicast pairs did not move to the core).
  const Status pairs = parse_blockscaled_config("bn=256,cluster=2", &c);
  EXPECT_FALSE(pairs.ok());
  EXPECT_NE(pairs.message().find("single CTAs"), std::string::npos) << pairs.message();
  EXPECT_FALSE(parse_blockscaled_config("cluster=4", &c).ok());
  EXPECT_FALSE(parse_blockscaled_config("grid=x", &c).ok());
  EXPECT_FALSE(parse_blockscaled_config("turns=1", &c).ok());  // MMA turn-taking was removed (docs/perf.md W1)
  // The overlapped epilogue: auto unless forced either way.
  EXPECT_EQ(BlockScaledConfig{}.overlap, -1);
  ASSERT_TRUE(parse_blockscaled_config("bn=256,overlap=0", &c).ok());
  EXPECT_EQ(c.overlap, 0);
  ASSERT_TRUE(parse_blockscaled_config("overlap=1", &c).ok());
  EXPECT_EQ(c.overlap, 1);
  EXPECT_FALSE(parse_blockscaled_config("overlap=2", &c).ok());
}

// The tile chooser is data: it says what it picks and why. Dense: the core's cost model over
// the block-scaled tiles (small M splits K or takes 64-row tiles; large M the wide tile); grouped:
// the wide tile unless forced.
TEST(BlockScaledValidation, ExplainsTileChoice) {
  const BlockScaledConfig def;
  const std::string big = explain_blockscaled_choice(def, false, 4096, 7168, 132, 16384);
  EXPECT_EQ(big.rfind("bm=128,bn=256,splits=1", 0), 0u) << big;
  EXPECT_NE(big.find("cost model"), std::string::npos) << big;
  const std::string small = explain_blockscaled_choice(def, false, 64, 2112, 132, 7168);
  EXPECT_TRUE(small.find("splits=1,") == std::string::npos || small.rfind("bm=64", 0) == 0) << small;
  // One tile row whose unsplit narrow tiles fill most of a wave does not split (docs/perf.md
  // block-scaled v16): every candidate is DRAM-bound there and a split only adds its fix-up.
  const std::string wave = explain_blockscaled_choice(def, false, 64, 4096, 132, 7168);
  EXPECT_EQ(wave.rfind("bm=64,bn=32,splits=1,", 0), 0u) << wave;
  EXPECT_NE(wave.find("one wave"), std::string::npos) << wave;
  // Two tile rows where 64 x 64 overfills the wave: a wider 64-row tile fills it (v17; N = 4992:
  // 80 wide, 126 units).
  const std::string wider = explain_blockscaled_choice(def, false, 96, 4992, 132, 4096);
  EXPECT_EQ(wider.rfind("bm=64,bn=80,splits=1,", 0), 0u) << wider;
  EXPECT_NE(wider.find("one wave"), std::string::npos) << wider;
  // At two rows 64 x 32 fills the wave at N = 1792-2112 only up to K = 4096 (v18): at K = 7168 the
  // model's split stays.
  const std::string w32 = explain_blockscaled_choice(def, false, 128, 2048, 132, 2048);
  EXPECT_EQ(w32.rfind("bm=64,bn=32,splits=1,", 0), 0u) << w32;
  EXPECT_NE(w32.find("one wave"), std::string::npos) << w32;
  const std::string w32_edge = explain_blockscaled_choice(def, false, 128, 2048, 132, 4096);
  EXPECT_EQ(w32_edge.rfind("bm=64,bn=32,splits=1,", 0), 0u) << w32_edge;
  const std::string w32_past = explain_blockscaled_choice(def, false, 128, 2048, 132, 5120);
  EXPECT_EQ(w32_past.find("bn=32,"), std::string::npos) << w32_past;
  const std::string w32_long = explain_blockscaled_choice(def, false, 128, 2112, 132, 7168);
  EXPECT_EQ(w32_long.find("bn=32,"), std::string::npos) << w32_long;
  // The 48-wide tile only where it fills one wave (variants.def: WAVE): N = 3072 at two rows takes
  // it; the model alone never does (64 x 24576 x 1536: many waves).
  const std::string w48 = explain_blockscaled_choice(def, false, 128, 3072, 132, 4096);
  EXPECT_EQ(w48.rfind("bm=64,bn=48,splits=1,", 0), 0u) << w48;
  const std::string many = explain_blockscaled_choice(def, false, 64, 24576, 132, 1536);
  EXPECT_EQ(many.find("bn=48,"), std::string::npos) << many;
  // Where the model splits K for one round at short K, the family's measured latency takes the split
  // back (block-scaled v19, calls 187-188): 64 x 32 unsplit at 16 x 2048 x 2048 (4.74 against 5.02 us
  // split in three) and 64 x 3072 x 1536 (4.50 against 5.74); past K = 8192, the fit's range, the
  // model's split stays (128 x 2048 x 10944: 14.9 against 17.0 us for 64 x 64 split in two).
  const std::string v19 = explain_blockscaled_choice(def, false, 16, 2048, 132, 2048);
  EXPECT_EQ(v19.rfind("bm=64,bn=32,splits=1,", 0), 0u) << v19;
  const std::string v19b = explain_blockscaled_choice(def, false, 64, 3072, 132, 1536);
  EXPECT_EQ(v19b.rfind("bm=64,bn=32,splits=1,", 0), 0u) << v19b;
  const std::string v19_long = explain_blockscaled_choice(def, false, 128, 2048, 132, 10944);
  EXPECT_EQ(v19_long.rfind("bm=128,bn=64,splits=3,", 0), 0u) << v19_long;
  // A split whose units need two rounds of clusters is taken back for the best unsplit one-round tile
  // (docs/perf.md block-scaled "Splits past one round"): at N = 4352 and 4864 no 64-row tile fills
  // 80% of a wave, the model split 64 x 64 three ways (204-228 units), and unsplit ran 1.05-1.18x
  // faster (16 x 4352 x 3072: 7.49 against 8.8 us).
  for (const auto& [m, n, k] : {std::tuple<int, int, int>{16, 4352, 3072}, {64, 4864, 4096}}) {
    const std::string one = explain_blockscaled_choice(def, false, m, n, 132, k);
    EXPECT_NE(one.find("splits=1,"), std::string::npos) << one;
    EXPECT_EQ(one.rfind("bm=", 0), 0u) << one;
    EXPECT_NE(one.find("splits past one round"), std::string::npos) << one;
  }
  // Past K = 8192 the one wave goes first only where the model's choice leaves its last wave under
  // 80% full: 128 x 128 split in two (72 units) at N = 4608, not 128 x 64 split in two (128 units)
  // at N = 4096.
  const std::string long_k = explain_blockscaled_choice(def, false, 128, 4608, 132, 16384);
  EXPECT_EQ(long_k.rfind("bm=64,bn=80,splits=1,", 0), 0u) << long_k;
  const std::string long_k_full = explain_blockscaled_choice(def, false, 128, 4096, 132, 16384);
  EXPECT_EQ(long_k_full.find("one wave"), std::string::npos) << long_k_full;
  EXPECT_EQ(long_k_full.find("splits=1,"), std::string::npos) << long_k_full;
  // Small M splits K within a cluster where a kernel reduces that way (no workspace); forced
  // through the workspace, it says so by leaving creduce out.
  EXPECT_NE(small.find(",creduce=1"), std::string::npos) << small;
  BlockScaledConfig via_workspace;
  via_workspace.cluster_reduce = 0;
  const std::string ws = explain_blockscaled_choice(via_workspace, false, 64, 2112, 132, 7168);
  EXPECT_EQ(ws.find("creduce"), std::string::npos) << ws;
  EXPECT_NE(ws.find("(forced)"), std::string::npos) << ws;
  ASSERT_TRUE(parse_blockscaled_config("creduce=1", &via_workspace).ok());
  EXPECT_EQ(via_workspace.cluster_reduce, 1);
  EXPECT_EQ(BlockScaledConfig{}.cluster_reduce, -1);
  EXPECT_FALSE(parse_blockscaled_config("creduce=-2", &via_workspace).ok());
  // Grouped: the wide tile with the overlapped epilogue (BF16 out) unless forced.
  EXPECT_EQ(explain_blockscaled_choice(def, true, 0, 0, 132).rfind("bn=256,overlap=1 (grouped", 0), 0u)
      << explain_blockscaled_choice(def, true, 0, 0, 132);
  BlockScaledConfig forced;
  forced.block_n = 128;
  const std::string f = explain_blockscaled_choice(forced, false, 4096, 7168, 132, 7168);
  EXPECT_NE(f.find("bn=128"), std::string::npos) << f;
  EXPECT_NE(f.find("(forced)"), std::string::npos) << f;
  EXPECT_EQ(explain_blockscaled_choice(forced, true, 0, 0, 132), "bn=128,overlap=1 (forced)");
  // A grouped kernel that is not compiled is named as such, with the ones that are.
  BlockScaledConfig plain_bf16;
  plain_bf16.overlap = 0;
  const std::string none = explain_blockscaled_choice(plain_bf16, true, 0, 0, 132);
  EXPECT_NE(none.find("no grouped kernel"), std::string::npos) << none;
  EXPECT_NE(none.find("compiled:"), std::string::npos) << none;
  // The wide tile runs its epilogue under the next unit's MMAs unless told not to; a split tile
  // cannot (its fix-up waits per lane).
  EXPECT_NE(big.find(",overlap=1"), std::string::npos) << big;
  BlockScaledConfig no_overlap;
  no_overlap.overlap = 0;
  const std::string off = explain_blockscaled_choice(no_overlap, false, 4096, 7168, 132, 16384);
  EXPECT_EQ(off.find("overlap"), std::string::npos) << off;
  BlockScaledConfig split_wide;
  split_wide.block_n = 256;
  split_wide.splits = 2;
  const std::string sw = explain_blockscaled_choice(split_wide, false, 4096, 7168, 132, 16384);
  EXPECT_EQ(sw.find("overlap"), std::string::npos) << sw;
  // An unknown SM count (what a failed device query leaves) still answers (it divided by zero).
  EXPECT_FALSE(explain_blockscaled_choice(def, false, 4096, 7168, 0, 7168).empty());
}

TEST(BlockScaledValidation, RejectsBadGroupedCalls) {
  alignas(128) static char ws[4096];
  const auto* probs = reinterpret_cast<const Fp8GroupedProblem*>(0x600000000);
  EXPECT_EQ(fp8_grouped_gemm(probs, 0, OutType::kBF16, ws, sizeof(ws), nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(fp8_grouped_gemm(nullptr, 2, OutType::kBF16, ws, sizeof(ws), nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(fp8_grouped_gemm(probs, 2, OutType::kBF16, nullptr, 0, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(fp8_grouped_gemm(probs, 100, OutType::kBF16, ws, 64, nullptr).code(), StatusCode::kWorkspaceTooSmall);
  EXPECT_GT(fp8_grouped_workspace_size(1024), 1024u * 3 * 128);
  // The dense GEMM's tiles and split-K are not the grouped kernel's.
  for (const char* text : {"bn=64", "bm=64", "splits=2"}) {
    BlockScaledConfig c;
    ASSERT_TRUE(parse_blockscaled_config(text, &c).ok());
    const size_t wsb = fp8_grouped_workspace_size(2);
    std::vector<char> big(wsb + 128);
    void* aligned = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(big.data()) + 127) / 128 * 128);
    const Status st = fp8_grouped_gemm(probs, 2, OutType::kBF16, aligned, wsb, nullptr, &c);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << text;
    EXPECT_NE(st.message().find("dense GEMM's"), std::string::npos) << text << ": " << st.message();
  }
}

// The masked layout's host checks, before any CUDA call: sizes, strides, null pointers, output
// type, workspace.
TEST(BlockScaledValidation, RejectsBadMaskedCalls) {
  alignas(128) static char ws[1 << 14];
  auto valid = [] {
    Fp8MaskedGroupedArgs a;
    a.groups = 4;
    a.max_m = 64;
    a.n = 256;
    a.k = 512;
    a.a = reinterpret_cast<const void*>(0x600000000);
    a.b = reinterpret_cast<const void*>(0x610000000);
    a.d = reinterpret_cast<void*>(0x620000000);
    a.sfa = reinterpret_cast<const float*>(0x630000000);
    a.sfa_ld = 64;
    a.sfb = reinterpret_cast<const float*>(0x640000000);
    a.masked_m = reinterpret_cast<const int*>(0x650000000);
    a.workspace = ws;
    a.workspace_bytes = sizeof(ws);
    return a;
  };
  auto expect = [](const Fp8MaskedGroupedArgs& a, StatusCode code, const char* text) {
    const Status st = fp8_grouped_gemm_masked(a, nullptr);
    EXPECT_EQ(st.code(), code) << st.to_string();
    EXPECT_NE(st.message().find(text), std::string::npos) << st.message();
  };
  auto a = valid();
  a.groups = 0;
  expect(a, StatusCode::kInvalidArgument, "groups");
  a = valid();
  a.max_m = 0;
  expect(a, StatusCode::kInvalidArgument, "max_m");
  a = valid();
  a.n = 100;
  expect(a, StatusCode::kInvalidArgument, "n");
  a = valid();
  a.sfa_ld = 62;
  expect(a, StatusCode::kInvalidArgument, "sfa_ld");
  a = valid();
  a.masked_m = nullptr;
  expect(a, StatusCode::kInvalidArgument, "masked_m");
  a = valid();
  a.out_type = OutType::kFP16;
  expect(a, StatusCode::kInvalidArgument, "out_type");
  a = valid();
  a.workspace_bytes = fp8_grouped_workspace_size(4);
  expect(a, StatusCode::kWorkspaceTooSmall, "workspace");
  EXPECT_EQ(fp8_grouped_masked_workspace_size(4), fp8_grouped_workspace_size(4) + 4 * sizeof(Fp8GroupedProblem));
}

// The contiguous layout's host checks, on a machine with or without a GPU (nothing launches: every
// argument here is refused first).
TEST(BlockScaledValidation, RejectsBadContiguousCalls) {
  alignas(128) static char ws[1 << 14];
  auto valid = [] {
    Fp8ContiguousGroupedArgs a;
    a.groups = 4;
    a.rows = 300;
    a.n = 256;
    a.k = 512;
    a.a = reinterpret_cast<const void*>(0x600000000);
    a.b = reinterpret_cast<const void*>(0x610000000);
    a.d = reinterpret_cast<void*>(0x620000000);
    a.sfa = reinterpret_cast<const float*>(0x630000000);
    a.sfa_ld = 300;
    a.sfb = reinterpret_cast<const float*>(0x640000000);
    a.offsets = reinterpret_cast<const int*>(0x650000000);
    a.workspace = ws;
    a.workspace_bytes = sizeof(ws);
    return a;
  };
  auto expect = [](const Fp8ContiguousGroupedArgs& a, StatusCode code, const char* text) {
    const Status st = fp8_grouped_gemm_contiguous(a, nullptr);
    EXPECT_EQ(st.code(), code) << st.to_string();
    EXPECT_NE(st.message().find(text), std::string::npos) << st.message();
  };
  auto a = valid();
  a.groups = 0;
  expect(a, StatusCode::kInvalidArgument, "groups");
  a = valid();
  a.rows = 0;
  expect(a, StatusCode::kInvalidArgument, "rows");
  a = valid();
  a.k = 100;
  expect(a, StatusCode::kInvalidArgument, "k");
  a = valid();
  a.sfa_ld = 298;
  expect(a, StatusCode::kInvalidArgument, "sfa_ld");
  a = valid();
  a.sfa_ld = 302;
  expect(a, StatusCode::kInvalidArgument, "sfa_ld");
  a = valid();
  a.offsets = nullptr;
  expect(a, StatusCode::kInvalidArgument, "offsets");
  a = valid();
  a.out_type = OutType::kFP16;
  expect(a, StatusCode::kInvalidArgument, "out_type");
  a = valid();
  a.workspace_bytes = fp8_grouped_workspace_size(4);
  expect(a, StatusCode::kWorkspaceTooSmall, "workspace");
  EXPECT_EQ(fp8_grouped_contiguous_workspace_size(4), fp8_grouped_masked_workspace_size(4));
  EXPECT_EQ(fp8_grouped_contiguous_workspace_size(0), 0u);
}

TEST(BlockScaledValidation, HostDescriptorRules) {
  std::vector<Fp8GroupedProblem> g(4, valid_group());
  EXPECT_TRUE(fp8_grouped_validate(g.data(), 4).ok());
  g[3].m = 0;
  g[3].a = nullptr;  // empty groups' pointers are not read
  EXPECT_TRUE(fp8_grouped_validate(g.data(), 4).ok());
  auto bad = [&](int idx, const char* needle) {
    const Status st = fp8_grouped_validate(g.data(), 4);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("group " + std::to_string(idx)), std::string::npos) << st.message();
    EXPECT_NE(st.message().find(needle), std::string::npos) << st.message();
    g.assign(4, valid_group());
  };
  g[1].m = -1;
  bad(1, "m < 0");
  g[2].n = 24;
  bad(2, "multiples of 16");
  g[0].d = nullptr;
  bad(0, "non-null");
  g[2].b = reinterpret_cast<const void*>(0x200000008);
  bad(2, "aligned");
  g[1].sfa_ld = 60;
  bad(1, "sfa_ld");
  // Sizes whose tile or K-block counts overflow an int (n = 2^31 - 16 gave a negative tile
  // count: nothing computed, status Ok; k = 2^31 - 16 a negative K-block count).
  g[3].n = 2147483632;
  bad(3, "2^30");
  g[0].k = 2147483632;
  bad(0, "2^30");
  g[2].m = (1 << 30) + 16;
  g[2].sfa_ld = (1 << 30) + 16;
  bad(2, "2^30");
  g[1].n = 1 << 30;  // the largest accepted
  EXPECT_TRUE(fp8_grouped_validate(g.data(), 4).ok());
  EXPECT_FALSE(fp8_grouped_validate(g.data(), 0).ok());
}

namespace {

FusedMoeArgs valid_moe() {
  FusedMoeArgs a;
  a.shape = MoeShape{128, 512, 2048, 256, 8};
  a.logits = reinterpret_cast<const void*>(0x100000000);
  a.softcap = 30.0f;
  a.x = reinterpret_cast<const void*>(0x200000000);
  a.w = reinterpret_cast<const void*>(0x300000000);
  a.w_scales = reinterpret_cast<const float*>(0x400000000);
  a.y = reinterpret_cast<void*>(0x500000000);
  return a;
}

// Checked before the GPU is touched: a fake, large-enough workspace pointer never gets used.
void expect_moe_invalid(const FusedMoeArgs& a, const char* needle, StatusCode code = StatusCode::kInvalidArgument) {
  const size_t bytes = fused_moe_workspace_size(valid_moe().shape, MoeReduce::kDeterministic, OutType::kBF16) * 4;
  const Status st = fused_moe_fp8(a, reinterpret_cast<void*>(0x1000000), bytes, nullptr);
  EXPECT_EQ(st.code(), code) << st.to_string();
  EXPECT_NE(st.message().find(needle), std::string::npos) << st.message();
}

}  // namespace

TEST(MoeValidation, RejectsBadShapesAndArguments) {
  FusedMoeArgs a = valid_moe();
  a.shape.top_k = 257;
  expect_moe_invalid(a, "top_k");
  a = valid_moe();
  a.shape.top_k = 0;
  expect_moe_invalid(a, "top_k");
  a = valid_moe();
  a.shape.k = 2000;
  expect_moe_invalid(a, "multiple of 128");
  a = valid_moe();
  a.shape.n = 500;
  expect_moe_invalid(a, "multiple of 16");
  a = valid_moe();
  a.shape.experts = 2048;
  expect_moe_invalid(a, "experts");
  a = valid_moe();
  a.shape.m = -1;
  expect_moe_invalid(a, "m must be");
  // 1e-40 is subnormal: its reciprocal, which the router multiplies by, is inf.
  for (float cap : {std::nanf(""), INFINITY, -1.0f, 1e-40f}) {
    a = valid_moe();
    a.softcap = cap;
    expect_moe_invalid(a, "softcap");
  }
  a = valid_moe();
  a.logits = nullptr;
  expect_moe_invalid(a, "logits");
  a = valid_moe();
  a.topk_ids = reinterpret_cast<const int32_t*>(0x600000000);
  expect_moe_invalid(a, "both topk_ids and topk_weights");
  a = valid_moe();
  a.w = reinterpret_cast<const void*>(0x300000008);
  expect_moe_invalid(a, "aligned");
  a = valid_moe();
  a.y = nullptr;
  expect_moe_invalid(a, "non-null");
  a = valid_moe();
  const Status st = fused_moe_fp8(a, reinterpret_cast<void*>(0x1000000), 1024, nullptr);
  EXPECT_EQ(st.code(), StatusCode::kWorkspaceTooSmall) << st.to_string();
  EXPECT_EQ(fused_moe_fp8(a, nullptr, 1 << 30, nullptr).code(), StatusCode::kInvalidArgument);
  const MoeConfig bad_tile{24, 0, 0};
  EXPECT_EQ(fused_moe_fp8(a, reinterpret_cast<void*>(0x1000000), size_t{1} << 30, nullptr, &bad_tile).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(fused_moe_workspace_size(MoeShape{1, 16, 100, 4, 2}, MoeReduce::kAtomic, OutType::kFP32), 0u);
  // A stage value outside the enum ran nothing and returned Ok.
  a = valid_moe();
  const Status stage = moe_run_stage(static_cast<MoeStage>(7), a, reinterpret_cast<void*>(0x1000000),
                                     size_t{1} << 30, nullptr);
  EXPECT_EQ(stage.code(), StatusCode::kInvalidArgument) << stage.to_string();
  EXPECT_NE(stage.message().find("unknown stage"), std::string::npos) << stage.message();
}

TEST(MoeValidation, ConfigChoiceAndParsing) {
  MoeConfig c;
  EXPECT_TRUE(parse_moe_config("tile=32,splits=2,grid=100", &c).ok());
  EXPECT_EQ(c.token_tile, 32);
  EXPECT_EQ(c.splits, 2);
  EXPECT_EQ(c.grid, 100);
  EXPECT_FALSE(parse_moe_config("tile=48", &c).ok());
  EXPECT_TRUE(parse_moe_config("splits=3", &c).ok());
  EXPECT_FALSE(parse_moe_config("splits=5", &c).ok());
  // Tokens as the MMA's rows: 128-token tiles only, never the tiny path; auto is off.
  ASSERT_TRUE(parse_moe_config("rows=1", &c).ok());
  EXPECT_EQ(c.token_rows, 1);
  EXPECT_NE(c.to_string().find("rows=1"), std::string::npos);
  EXPECT_TRUE(parse_moe_config("rows=1,tile=128", &c).ok());
  EXPECT_FALSE(parse_moe_config("rows=1,tile=64", &c).ok());
  EXPECT_FALSE(parse_moe_config("rows=1,tiny=1", &c).ok());
  EXPECT_FALSE(parse_moe_config("rows=2", &c).ok());
  // The token-rows path runs the block-scaled core: unsplit, 128- or 256-wide weight tiles.
  EXPECT_FALSE(parse_moe_config("rows=1,splits=2", &c).ok());
  EXPECT_TRUE(parse_moe_config("rows=1,splits=1,bn=128", &c).ok());
  EXPECT_EQ(c.block_n, 128);
  EXPECT_NE(c.to_string().find("bn=128"), std::string::npos);
  EXPECT_FALSE(parse_moe_config("rows=1,bn=64", &c).ok());
  EXPECT_FALSE(parse_moe_config("rows=0,bn=128", &c).ok());
  // The weights' L2 lines evicted first: the token-rows path's, auto at k <= 2048 only (W6 v8).
  ASSERT_TRUE(parse_moe_config("rows=1,wfirst=0", &c).ok());
  EXPECT_EQ(c.weights_evict_first, 0);
  EXPECT_NE(c.to_string().find("wfirst=0"), std::string::npos);
  EXPECT_FALSE(parse_moe_config("wfirst=2", &c).ok());
  EXPECT_FALSE(parse_moe_config("rows=0,wfirst=1", &c).ok());
  // The last partial wave's tiles cut along K into parts of at least `tail` K blocks: the
  // token-rows path's, atomic mode only; auto 16 (W6 v9).
  ASSERT_TRUE(parse_moe_config("rows=1,tail=0", &c).ok());
  EXPECT_EQ(c.tail_split, 0);
  EXPECT_NE(c.to_string().find("tail=0"), std::string::npos);
  ASSERT_TRUE(parse_moe_config("rows=1,tail=3", &c).ok());
  EXPECT_EQ(c.tail_split, 3);
  ASSERT_TRUE(parse_moe_config("rows=1,tail=8191", &c).ok());
  EXPECT_FALSE(parse_moe_config("rows=1,tail=8192", &c).ok());
  EXPECT_FALSE(parse_moe_config("rows=1,tail=-2", &c).ok());
  EXPECT_FALSE(parse_moe_config("rows=0,tail=1", &c).ok());
  {
    std::string why;
    EXPECT_EQ(moe_choose_config(MoeShape{8192, 512, 2048, 256, 8}, MoeReduce::kAtomic, 132, nullptr, &why).tail_split, 16)
        << why;
    MoeConfig forced;
    forced.tail_split = 1;
    EXPECT_EQ(moe_choose_config(MoeShape{8192, 512, 2048, 256, 8}, MoeReduce::kAtomic, 132, &forced, &why).tail_split, 1)
        << why;
    const MoeConfig det = moe_choose_config(MoeShape{8192, 512, 2048, 256, 8}, MoeReduce::kDeterministic, 132, &forced, &why);
    EXPECT_EQ(det.tail_split, 0) << why;
    EXPECT_NE(why.find("tail=0: deterministic"), std::string::npos) << why;
    EXPECT_EQ(moe_choose_config(MoeShape{128, 512, 2048, 256, 8}, MoeReduce::kAtomic, 132, nullptr).tail_split, 0);
  }
  {
    std::string why;
    const MoeConfig short_k = moe_choose_config(MoeShape{8192, 512, 2048, 256, 8}, MoeReduce::kAtomic, 132, nullptr, &why);
    EXPECT_EQ(short_k.token_rows, 1);
    EXPECT_EQ(short_k.weights_evict_first, 1) << why;
    EXPECT_NE(why.find("wfirst=1"), std::string::npos) << why;
    const MoeConfig long_k = moe_choose_config(MoeShape{4096, 2048, 7168, 64, 4}, MoeReduce::kAtomic, 132, nullptr, &why);
    EXPECT_EQ(long_k.token_rows, 1);
    EXPECT_EQ(long_k.weights_evict_first, 0) << why;
    EXPECT_EQ(moe_choose_config(MoeShape{4096, 2048, 2176, 64, 4}, MoeReduce::kAtomic, 132, nullptr).weights_evict_first, 0);
    MoeConfig forced;
    forced.weights_evict_first = 1;  // forced on where auto is off
    EXPECT_EQ(moe_choose_config(MoeShape{4096, 2048, 7168, 64, 4}, MoeReduce::kAtomic, 132, &forced).weights_evict_first, 1);
    // Swap-AB has no such loads: 0 there, whatever auto would say.
    EXPECT_EQ(moe_choose_config(MoeShape{128, 512, 2048, 256, 8}, MoeReduce::kAtomic, 132, nullptr).weights_evict_first, 0);
  }
  {
    MoeConfig rows;
    rows.token_rows = 1;
    const MoeConfig chosen = moe_choose_config(MoeShape{1, 512, 2048, 256, 8}, MoeReduce::kAtomic, 132, &rows);
    EXPECT_EQ(chosen.token_tile, 128);
    EXPECT_EQ(chosen.tiny, 0);
    EXPECT_EQ(moe_choose_config(MoeShape{128, 512, 2048, 256, 8}, MoeReduce::kAtomic, 132, nullptr).token_rows, 0);
    const MoeConfig big = moe_choose_config(MoeShape{2048, 512, 2048, 256, 8}, MoeReduce::kAtomic, 132, nullptr);
    EXPECT_EQ(big.token_rows, 1);  // 64 tokens per expert on average
    EXPECT_EQ(big.token_tile, 128);
    EXPECT_EQ(big.block_n, 256);
    EXPECT_EQ(big.splits, 1);
    MoeConfig split2;
    split2.splits = 2;  // a forced split keeps swap-AB
    EXPECT_EQ(moe_choose_config(MoeShape{2048, 512, 2048, 256, 8}, MoeReduce::kAtomic, 132, &split2).token_rows, 0);
    MoeConfig tile64;
    tile64.token_tile = 64;  // a forced swap-AB tile keeps swap-AB
    EXPECT_EQ(moe_choose_config(MoeShape{2048, 512, 2048, 256, 8}, MoeReduce::kAtomic, 132, &tile64).token_rows, 0);
    // The token-rows GEMM gathers at 32-bit offsets into the quantized tokens: exactly 4 GiB of them
    // still runs it, one token row more does not, forced or not.
    EXPECT_EQ(moe_choose_config(MoeShape{524288, 512, 8192, 64, 8}, MoeReduce::kAtomic, 132, nullptr).token_rows, 1);
    const MoeConfig past = moe_choose_config(MoeShape{524289, 512, 8192, 64, 8}, MoeReduce::kAtomic, 132, nullptr);
    EXPECT_EQ(past.token_rows, 0);
    EXPECT_EQ(past.block_n, 0);
    MoeConfig rows256;
    rows256.token_rows = 1;
    rows256.block_n = 256;
    std::string why;
    const MoeShape past_shape{524289, 512, 8192, 64, 8};
    EXPECT_EQ(moe_choose_config(past_shape, MoeReduce::kAtomic, 132, &rows256, &why).token_rows, 0);
    EXPECT_NE(why.find("32-bit offsets"), std::string::npos) << why;
  }
  EXPECT_FALSE(parse_moe_config("stages=4", &c).ok());
  EXPECT_TRUE(parse_moe_config("pdl=0", &c).ok());
  EXPECT_EQ(c.pdl, 0);
  EXPECT_FALSE(parse_moe_config("tiny=2", &c).ok());
  EXPECT_FALSE(parse_moe_config("pdl=-2", &c).ok());
  EXPECT_TRUE(parse_moe_config("pdlfirst=0", &c).ok());
  EXPECT_EQ(c.pdl_first, 0);
  EXPECT_FALSE(parse_moe_config("pdlfirst=2", &c).ok());
  std::string why;
  // The seed's shape: 4 tokens per expert on average -> the smallest tile, 1008 tiles -> no split.
  MoeConfig seed = moe_choose_config(MoeShape{128, 512, 2048, 256, 8}, MoeReduce::kAtomic, 132, nullptr, &why);
  EXPECT_EQ(seed.token_tile, 16) << why;
  EXPECT_EQ(seed.splits, 1) << why;
  // M = 1: 8 experts x 4 N blocks = 32 tiles on 132 SMs -> split K.
  MoeConfig one = moe_choose_config(MoeShape{1, 512, 2048, 256, 8}, MoeReduce::kAtomic, 132, nullptr, &why);
  EXPECT_EQ(one.splits, 4) << why;
  EXPECT_EQ(moe_choose_config(MoeShape{1, 512, 2048, 256, 8}, MoeReduce::kDeterministic, 132, nullptr).splits, 1);
  EXPECT_EQ(moe_choose_config(MoeShape{8192, 512, 2048, 256, 8}, MoeReduce::kAtomic, 132, nullptr).token_tile, 128);
  EXPECT_EQ(seed.prefetch_mb, 0) << why;  // measured no gain
  EXPECT_EQ(seed.tile_prefetch, 0) << why;
  EXPECT_EQ(seed.pdl, 1) << why;
  EXPECT_EQ(one.tiny, 1) << why;         // one token: routing inside the GEMM
  EXPECT_EQ(seed.tiny, 0) << why;
  EXPECT_EQ(one.pdl_first, 1) << why;  // the tiny path's first kernel waits resident
  EXPECT_EQ(seed.pdl_first, 0) << why;  // the split path's route kernel measured slower so
  EXPECT_EQ(moe_choose_config(MoeShape{1, 512, 2048, 256, 8}, MoeReduce::kDeterministic, 132, nullptr).tiny, 0);
  EXPECT_EQ(moe_choose_config(MoeShape{1, 512, 2048, 512, 8}, MoeReduce::kAtomic, 132, nullptr).tiny, 0);
  EXPECT_EQ(moe_choose_config(MoeShape{8, 512, 2048, 256, 8}, MoeReduce::kAtomic, 132, nullptr).tiny, 0);
  EXPECT_TRUE(parse_moe_config("tiny=1", &c).ok());
  EXPECT_EQ(c.tiny, 1);
  EXPECT_FALSE(moe_config_table().empty());
}
