#include <cuda_fp4.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>

#include "formats/e4m3.h"
#include "formats/nvfp4.h"
#include "gemm/nvfp4/variant_table.h"
#include "gemm/nvfp4/variants.h"
#include "lowbit/nvfp4.h"
#include "test_seed.h"

using namespace lowbit::formats;

TEST(E2M1, EveryCodeRoundTrips) {
  const float mags[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (uint8_t c = 0; c < 16; ++c) {
    const float v = e2m1_to_float(c);
    EXPECT_EQ(std::fabs(v), mags[c & 7]) << int(c);
    EXPECT_EQ(float_to_e2m1(v), c) << int(c);
  }
}

TEST(E2M1, RoundsHalfToEvenAndSaturates) {
  EXPECT_EQ(float_to_e2m1(0.25f), 0x0);   // 0 | 0.5 -> 0
  EXPECT_EQ(float_to_e2m1(0.75f), 0x2);   // 0.5 | 1 -> 1 (even)
  EXPECT_EQ(float_to_e2m1(1.25f), 0x2);   // 1 | 1.5 -> 1
  EXPECT_EQ(float_to_e2m1(1.75f), 0x4);   // 1.5 | 2 -> 2
  EXPECT_EQ(float_to_e2m1(2.5f), 0x4);    // 2 | 3 -> 2
  EXPECT_EQ(float_to_e2m1(3.5f), 0x6);    // 3 | 4 -> 4
  EXPECT_EQ(float_to_e2m1(5.0f), 0x6);    // 4 | 6 -> 4
  EXPECT_EQ(float_to_e2m1(5.01f), 0x7);
  EXPECT_EQ(float_to_e2m1(1e9f), 0x7);
  EXPECT_EQ(float_to_e2m1(-1e9f), 0xF);
  EXPECT_EQ(float_to_e2m1(-0.1f), 0x8);   // rounds to -0
}

TEST(E2M1, MatchesCudaConversion) {
  const uint64_t seed = lowbit_test::seed();
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(-8.0f, 8.0f);
  for (int i = 0; i < 100000; ++i) {
    const float x = d(rng);
    const uint8_t want = static_cast<uint8_t>(__nv_cvt_float_to_fp4(x, __NV_E2M1, cudaRoundNearest)) & 0xF;
    ASSERT_EQ(float_to_e2m1(x), want) << "x=" << x << " seed=" << seed;
  }
  for (float x : {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, -0.25f, -5.0f, 7.0f, NAN}) {
    const uint8_t want = static_cast<uint8_t>(__nv_cvt_float_to_fp4(x, __NV_E2M1, cudaRoundNearest)) & 0xF;
    EXPECT_EQ(float_to_e2m1(x), want) << "x=" << x;
  }
}

TEST(Nvfp4Quantizer, SaturatesAmaxToSixTimes448) {
  std::vector<float> x(32, 0.0f);
  x[3] = -12.5f;  // the tensor amax
  x[17] = 1.0f;
  const auto t = quantize_nvfp4(x.data(), 1, 32);
  EXPECT_FLOAT_EQ(t.global_scale, 12.5f / (6.0f * 448.0f));
  EXPECT_EQ(t.scales[0], 0x7E);  // 448: block amax / 6 * enc = 448 exactly
  EXPECT_EQ(t.packed[1] & 0xF0, 0xF0);  // element 3 (high nibble of byte 1) is -6
  const auto back = dequantize_nvfp4(t);
  EXPECT_NEAR(back[3], -12.5f, 1e-5f);
}

TEST(Nvfp4Quantizer, ZeroRowsAndZeroTensor) {
  std::vector<float> x(2 * 32, 0.0f);
  for (int i = 32; i < 64; ++i) x[i] = 0.01f * (i - 40);
  const auto t = quantize_nvfp4(x.data(), 2, 32);
  EXPECT_EQ(t.scales[0], 0);
  EXPECT_EQ(t.scales[1], 0);
  for (int j = 0; j < 16; ++j) EXPECT_EQ(t.packed[j], 0) << j;
  const auto z = quantize_nvfp4(std::vector<float>(32, 0.0f).data(), 1, 32);
  EXPECT_EQ(z.global_scale, 1.0f);
  for (float v : dequantize_nvfp4(z)) EXPECT_EQ(v, 0.0f);
}

TEST(Nvfp4Quantizer, SubnormalBlockScalesAndRoundTripBound) {
  const uint64_t seed = lowbit_test::seed();
  std::mt19937_64 rng(seed);
  const int64_t rows = 8, cols = 256;
  std::vector<float> x(rows * cols);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      // Blocks whose magnitudes span 2^-14 .. 2^3 of the tensor amax: the small ones get
      // subnormal E4M3 scales.
      const float mag = std::ldexp(1.0f, static_cast<int>((c / 16) % 18) - 14);
      x[r * cols + c] = nd(rng) * mag;
    }
  const auto t = quantize_nvfp4(x.data(), rows, cols);
  bool saw_subnormal = false;
  for (uint8_t s : t.scales) saw_subnormal |= (s != 0 && (s & 0x78) == 0);
  EXPECT_TRUE(saw_subnormal) << "no block got a subnormal E4M3 scale; seed " << seed;
  const auto back = dequantize_nvfp4(t);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < cols / 16; ++b) {
      float bamax = 0.0f;
      for (int i = 0; i < 16; ++i) bamax = std::max(bamax, std::fabs(x[r * cols + b * 16 + i]));
      const float s = e4m3_to_float(t.scales[r * (cols / 16) + b]) * t.global_scale;
      for (int i = 0; i < 16; ++i) {
        const int64_t e = r * cols + b * 16 + i;
        // Half the widest E2M1 gap (2 -> one unit of s), plus what rounding the block scale to
        // E4M3 can push past 6 (6.25%), plus the scale's own subnormal quantization.
        const float bound = s * 1.0f + 0.0625f * bamax + std::ldexp(1.0f, -9) * 6.0f * t.global_scale;
        ASSERT_LE(std::fabs(x[e] - back[e]), bound * 1.0001f) << "row " << r << " block " << b << " seed " << seed;
      }
    }
}

TEST(Nvfp4Scales, SwizzledLayoutMatchesTheAtomFormula) {
  EXPECT_EQ(nvfp4_scale_offset_swizzled(0, 0, 8), 0u);
  EXPECT_EQ(nvfp4_scale_offset_swizzled(1, 0, 8), 16u);
  EXPECT_EQ(nvfp4_scale_offset_swizzled(32, 0, 8), 4u);
  EXPECT_EQ(nvfp4_scale_offset_swizzled(0, 1, 8), 1u);
  EXPECT_EQ(nvfp4_scale_offset_swizzled(127, 3, 8), 511u);
  EXPECT_EQ(nvfp4_scale_offset_swizzled(0, 4, 8), 512u);       // next atom along K
  EXPECT_EQ(nvfp4_scale_offset_swizzled(128, 0, 8), 1024u);    // atoms K-first, then rows
  EXPECT_EQ(nvfp4_scale_offset_swizzled(128, 0, 9), 1536u);    // 9 k-blocks -> 3 atoms per row band
  // A bijection onto the padded tensor.
  const int64_t rows = 200, kb = 7;
  std::set<size_t> seen;
  for (int64_t r = 0; r < 256; ++r)
    for (int64_t b = 0; b < 8; ++b) {
      const size_t o = nvfp4_scale_offset_swizzled(r, b, kb);
      EXPECT_LT(o, nvfp4_scales_swizzled_bytes(rows, kb));
      EXPECT_TRUE(seen.insert(o).second) << r << "," << b;
    }
  std::vector<uint8_t> rm(rows * kb);
  for (size_t i = 0; i < rm.size(); ++i) rm[i] = static_cast<uint8_t>(i * 37 + 1);
  const auto sw = swizzle_nvfp4_scales(rm.data(), rows, kb);
  EXPECT_EQ(sw[nvfp4_scale_offset_swizzled(150, 5, kb)], rm[150 * kb + 5]);
}

// The grouped workspace size of a capacity near INT64_MAX once wrapped to a few hundred bytes, so
// a call passed the size check and staged activations past the buffer. Past 2^40 elements the
// request is invalid (0, as for a negative one); up to it the size is at least the staging bytes.
TEST(Nvfp4GroupedWorkspace, HugeCapacityIsInvalidNotWrapped) {
  EXPECT_EQ(lowbit::nvfp4_grouped_workspace_size(1, INT64_MAX), 0u);
  EXPECT_EQ(lowbit::nvfp4_grouped_workspace_size(1, lowbit::kNvfp4MaxStagedElements + 1), 0u);
  EXPECT_EQ(lowbit::nvfp4_grouped_workspace_size(1, -1), 0u);
  EXPECT_GE(lowbit::nvfp4_grouped_workspace_size(1, lowbit::kNvfp4MaxStagedElements),
            static_cast<size_t>(lowbit::kNvfp4MaxStagedElements) * 2);
  EXPECT_GE(lowbit::nvfp4_grouped_workspace_size(1024, 1000), 2000u);
}

// A tensor whose amax is so small that 2688 / amax overflowed FP32: zeros came back as +-amax or
// NaN, and an all-zero block's scale byte was NaN. Now zeros stay zero and nothing is NaN.
TEST(Nvfp4Quantizer, TinyAmaxKeepsZerosAndIsFinite) {
  std::vector<float> x(32, 0.0f);
  x[0] = 1e-36f;
  x[1] = 2.5e-37f;
  const auto t = quantize_nvfp4(x.data(), 1, 32);
  const auto back = dequantize_nvfp4(t);
  EXPECT_TRUE(std::isfinite(t.global_scale));
  for (int i = 0; i < 32; ++i) {
    EXPECT_FALSE(std::isnan(back[i])) << i;
    if (i >= 2) {
      EXPECT_EQ(back[i], 0.0f) << i;
    }
  }
  EXPECT_NE(t.scales[1], 0x7F) << "the all-zero block's scale must not be NaN";
}

// Rows of whole 16-element blocks only: a partial block has no scale (it was left unquantized,
// and the dequantizer read past the scales); a malformed tensor dequantizes to nothing.
TEST(Nvfp4Quantizer, PartialBlocksAreRefused) {
  std::vector<float> x(2 * 20, 1.0f);
  const Nvfp4Tensor t = quantize_nvfp4(x.data(), 2, 20);
  EXPECT_EQ(t.rows, 0);
  EXPECT_TRUE(t.packed.empty());
  EXPECT_TRUE(dequantize_nvfp4(t).empty());
  Nvfp4Tensor bad = quantize_nvfp4(x.data(), 2, 16);
  ASSERT_EQ(bad.rows, 2);
  EXPECT_EQ(dequantize_nvfp4(bad).size(), 32u);
  bad.cols = 20;  // claims more columns than it holds
  EXPECT_TRUE(dequantize_nvfp4(bad).empty());
}

// Configs nvfp4_gemm refuses size no workspace; a valid split config sizes the counter region,
// the partials and (with NVFP4 activations) the staged copy.
TEST(Nvfp4GemmWorkspace, InvalidConfigsSizeNothing) {
  lowbit::Nvfp4GemmConfig c;
  c.block_tokens = 48;
  c.splits = 2;
  EXPECT_EQ(lowbit::nvfp4_gemm_workspace_size(128, 4096, 4096, false, c), 0u);
  c.block_tokens = 16;
  c.splits = 64;  // 32 K blocks of 128
  EXPECT_EQ(lowbit::nvfp4_gemm_workspace_size(16, 4096, 4096, false, c), 0u);
  c.splits = 0;
  EXPECT_EQ(lowbit::nvfp4_gemm_workspace_size(16, 4096, 4096, false, c), 0u);
  c.splits = 1;
  EXPECT_EQ(lowbit::nvfp4_gemm_workspace_size(16, 4096, 4096, false, c), 0u);  // no split, BF16 activations
  EXPECT_EQ(lowbit::nvfp4_gemm_workspace_size(16, 4096, 4096, true, c), 16384u + 16u * 4096 * 2);
  c.splits = 4;
  EXPECT_GT(lowbit::nvfp4_gemm_workspace_size(16, 4096, 4096, false, c), 16384u);
  // Shapes nvfp4_gemm refuses, and a split over more tiles than the counter region holds.
  EXPECT_EQ(lowbit::nvfp4_gemm_workspace_size(16, 40, 4096, true, c), 0u);    // N % 16
  EXPECT_EQ(lowbit::nvfp4_gemm_workspace_size(16, 4096, 4016, true, c), 0u);  // K % 32
  c.splits = 2;
  EXPECT_EQ(lowbit::nvfp4_gemm_workspace_size(4096, 16384, 4096, false, c), 0u);  // 32768 tiles
}

// The kernels apply a_global_scale * b_global_scale * 256 as one FP32 factor: scales whose
// product overflows to inf or underflows to 0 are refused, like non-finite ones.
TEST(Nvfp4GemmValidation, GlobalScaleProductMustBeANormalFloat) {
  std::vector<uint8_t> buf(1 << 16);
  lowbit::Nvfp4GroupedProblem g{};
  g.m = 16;
  g.n = 128;
  g.k = 128;
  g.a = g.a_scales = g.b_prepacked = g.d = buf.data();
  struct Pair {
    float a, b;
    bool ok;
  };
  const Pair pairs[] = {{1.0f, 1.0f, true},           {1e-3f, 1e-3f, true},       {1.0f, 2e36f, false},  // 5e38: inf
                        {1e-23f, 1e-23f, false},      /* 2.6e-44: below FLT_MIN */ {0.0f, 1.0f, false},
                        {1.0f, std::nanf(""), false}, {INFINITY, 1.0f, false}};
  for (const Pair& p : pairs) {
    g.a_global_scale = p.a;
    g.b_global_scale = p.b;
    EXPECT_EQ(lowbit::nvfp4_grouped_validate(&g, 1, true).ok(), p.ok) << p.a << " x " << p.b;
  }
  lowbit::Nvfp4GemmArgs a;
  a.m = 16;
  a.n = 128;
  a.k = 128;
  a.a_bf16 = buf.data();
  a.b_prepacked = buf.data();
  a.d = buf.data();
  a.b_global_scale = 2e36f;
  const auto st = lowbit::nvfp4_gemm(a, nullptr);
  EXPECT_EQ(st.code(), lowbit::StatusCode::kInvalidArgument) << st.to_string();
  EXPECT_NE(st.message().find("normal FP32"), std::string::npos) << st.to_string();
}

// NVFP4 activations with no room to stage them: refused on the host (every group used to be
// refused on the device instead, D left untouched).
TEST(Nvfp4GroupedValidation, ActivationsNeedStagingRoom) {
  alignas(256) static char ws[1 << 16];
  lowbit::Nvfp4GroupedArgs a;
  a.problems = reinterpret_cast<const lowbit::Nvfp4GroupedProblem*>(ws);
  a.groups = 1;
  a.nvfp4_activations = true;
  a.max_activation_elements = 0;
  a.workspace = ws;
  a.workspace_bytes = sizeof(ws);
  const lowbit::Status st = lowbit::nvfp4_grouped_gemm(a, nullptr);
  EXPECT_EQ(st.code(), lowbit::StatusCode::kInvalidArgument) << st.to_string();
  EXPECT_NE(st.message().find("max_activation_elements >= 32"), std::string::npos) << st.to_string();
}

// Config text: whole integers only (atoi once read "splits=4x" as 4 and wrapped 2^32 + 1 to 1).
TEST(Nvfp4Config, ParsesWholeIntegersOnly) {
  lowbit::Nvfp4GemmConfig c;
  ASSERT_TRUE(lowbit::parse_nvfp4_config("tokens=32,splits=2", &c).ok());
  EXPECT_EQ(c.block_tokens, 32);
  EXPECT_EQ(c.splits, 2);
  for (const char* bad : {"tokens=16junk", "tokens=16,splits=4x", "splits=4294967297", "splits=99999999999",
                          "tokens", "tokens=24", "splits=0", "stages=3"})
    EXPECT_FALSE(lowbit::parse_nvfp4_config(bad, &c).ok()) << bad;
}

// Non-finite input has no NVFP4 encoding under the standard recipe: an infinite amax zeroed
// every block scale and made the global scale infinite (every value then dequantized to NaN).
TEST(Nvfp4Quantizer, NonFiniteInputIsRefused) {
  std::vector<float> x(64, 1.0f);
  EXPECT_EQ(quantize_nvfp4(x.data(), 2, 32).rows, 2);
  for (float bad : {INFINITY, -INFINITY, NAN}) {
    x[37] = bad;
    const Nvfp4Tensor t = quantize_nvfp4(x.data(), 2, 32);
    EXPECT_EQ(t.rows, 0) << bad;
    EXPECT_TRUE(t.packed.empty() && t.scales.empty()) << bad;
  }
}

// Scale bytes are unsigned magnitudes, 0x7F reading as 480 (what the GEMM's bit-placement decode
// of the weights gives, and now the activations' too).
TEST(Nvfp4Scales, BytesAreUnsignedMagnitudes) {
  EXPECT_EQ(nvfp4_scale_to_float(0x38), 1.0f);
  EXPECT_EQ(nvfp4_scale_to_float(0xB8), 1.0f);
  EXPECT_EQ(nvfp4_scale_to_float(0x7E), 448.0f);
  EXPECT_EQ(nvfp4_scale_to_float(0x7F), 480.0f);
  EXPECT_EQ(nvfp4_scale_to_float(0xFF), 480.0f);
  EXPECT_EQ(nvfp4_scale_to_float(0x80), 0.0f);
  EXPECT_EQ(nvfp4_scale_to_float(0x01), std::ldexp(1.0f, -9));
  Nvfp4Tensor t;
  t.rows = 1;
  t.cols = 16;
  t.packed.assign(8, 0x22);  // 1.0 everywhere
  t.scales = {0xFF};
  t.global_scale = 0.5f;
  const std::vector<float> v = dequantize_nvfp4(t);
  ASSERT_EQ(v.size(), 16u);
  for (float e : v) EXPECT_EQ(e, 240.0f);
}

// The compiled token tiles come from variants.def, one generated translation unit each: every line
// has its dense launcher, only the tiles whose output is not staged in the ring have a grouped one,
// and the error messages list the same tiles.
TEST(Nvfp4Variants, EveryLineHasItsLaunchersAndTheMessagesListThem) {
  for (const auto& spec : lowbit::nvfp4::kNvfp4VariantSpecs) {
    const lowbit::nvfp4::Nvfp4Variant* v = lowbit::nvfp4::find_nvfp4_variant(spec.tokens);
    ASSERT_NE(v, nullptr) << spec.tokens;
    EXPECT_NE(v->launch_dense, nullptr) << spec.tokens;
    EXPECT_EQ(v->launch_grouped != nullptr, spec.tokens != 256) << spec.tokens;
    EXPECT_GE(v->stages, 2) << spec.tokens;
    EXPECT_GT(v->smem, 0) << spec.tokens;
    EXPECT_LE(v->smem, 232448) << spec.tokens;
  }
  EXPECT_EQ(lowbit::nvfp4::find_nvfp4_variant(48), nullptr);
  EXPECT_EQ(lowbit::nvfp4::nvfp4_tile_list(), "16, 32, 64, 128 or 256");
  EXPECT_EQ(lowbit::nvfp4::nvfp4_tile_list(/*grouped=*/true), "16, 32, 64 or 128");
}
