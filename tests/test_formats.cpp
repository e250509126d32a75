#include <cuda_fp8.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "formats/bf16.h"
#include "formats/e4m3.h"
#include "formats/fp16.h"
#include "formats/quantize.h"
#include "test_seed.h"

using namespace lowbit::formats;

TEST(E4M3, EveryCodeRoundTrips) {
  for (int c = 0; c < 256; ++c) {
    const uint8_t code = static_cast<uint8_t>(c);
    const float v = e4m3_to_float(code);
    if ((c & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(v)) << c;
      EXPECT_EQ(float_to_e4m3(v), 0x7F);
      continue;
    }
    EXPECT_EQ(float_to_e4m3(v), code) << "code " << c << " value " << v;
  }
  EXPECT_EQ(e4m3_to_float(0x7E), 448.0f);
  EXPECT_EQ(e4m3_to_float(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(e4m3_to_float(0x08), std::ldexp(1.0f, -6));
}

TEST(E4M3, RoundsHalfToEvenAndSaturates) {
  EXPECT_EQ(float_to_e4m3(1.0625f), 0x38);   // halfway 1 and 1.125 -> 1 (even)
  EXPECT_EQ(float_to_e4m3(1.1875f), 0x3A);   // halfway 1.125 and 1.25 -> 1.25 (even)
  EXPECT_EQ(float_to_e4m3(std::ldexp(1.0f, -10)), 0x00);      // half the smallest subnormal -> 0
  EXPECT_EQ(float_to_e4m3(3 * std::ldexp(1.0f, -10)), 0x02);  // 1.5 subnormal steps -> 2 (even)
  EXPECT_EQ(float_to_e4m3(464.0f), 0x7E);    // would round to 480: saturates to 448
  EXPECT_EQ(float_to_e4m3(1e30f), 0x7E);
  EXPECT_EQ(float_to_e4m3(-1e30f), 0xFE);
  EXPECT_EQ(float_to_e4m3(INFINITY), 0x7E);
  EXPECT_EQ(float_to_e4m3(-0.0f), 0x80);
}

TEST(E4M3, MatchesCudaConversionOnRandomFloats) {
  const uint64_t seed = lowbit_test::seed();
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> exp_dist(-12.0f, 10.0f);
  for (int i = 0; i < 200000; ++i) {
    const float mag = std::exp2(exp_dist(rng));
    const float x = (rng() & 1) ? -mag : mag;
    const uint8_t want = static_cast<uint8_t>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
    ASSERT_EQ(float_to_e4m3(x), want) << "x=" << x << " seed=" << seed;
  }
  // Exact midpoints between neighbouring codes exercise the tie rule.
  for (int c = 0; c < 0x7E; ++c) {
    const float mid = 0.5f * (e4m3_to_float(static_cast<uint8_t>(c)) + e4m3_to_float(static_cast<uint8_t>(c + 1)));
    const uint8_t want = static_cast<uint8_t>(__nv_cvt_float_to_fp8(mid, __NV_SATFINITE, __NV_E4M3));
    EXPECT_EQ(float_to_e4m3(mid), want) << "midpoint after code " << c;
  }
}

TEST(BF16, RoundTripAndRounding) {
  for (uint32_t h = 0; h < 0x10000; h += 7) {
    const float f = bf16_to_float(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(float_to_bf16(f), h);
  }
  EXPECT_EQ(float_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);  // tie -> even
  EXPECT_EQ(float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(NAN))));
}

TEST(Quantize, PerTensorScaleMapsAmaxTo448) {
  std::vector<float> x = {0.0f, -3.5f, 1.25f, 7.0f, -7.0f, 0.001f};
  const auto q = quantize_e4m3_per_tensor(x);
  EXPECT_FLOAT_EQ(q.scale, 7.0f / 448.0f);
  EXPECT_EQ(q.codes[3], 0x7E);
  EXPECT_EQ(q.codes[4], 0xFE);
  for (size_t i = 0; i < x.size(); ++i)
    EXPECT_NEAR(e4m3_to_float(q.codes[i]) * q.scale, x[i], std::fabs(x[i]) * 0.0625 + 1e-3);
  const auto z = quantize_e4m3_per_tensor(std::vector<float>(4, 0.0f));
  EXPECT_EQ(z.scale, 1.0f);
  // A tensor so small that 448 / amax overflows FP32: zeros stay zeros (0 * inf made them NaN),
  // nothing is NaN, and the values come back to within the scale's quantum.
  const std::vector<float> tiny = {1e-37f, -5e-38f, 0.0f, 2e-38f};
  const auto t = quantize_e4m3_per_tensor(tiny);
  EXPECT_TRUE(std::isfinite(t.scale) && t.scale > 0.0f);
  EXPECT_EQ(t.codes[2], 0x00);
  for (size_t i = 0; i < tiny.size(); ++i) {
    EXPECT_FALSE(std::isnan(e4m3_to_float(t.codes[i]))) << i;
    EXPECT_NEAR(e4m3_to_float(t.codes[i]) * t.scale, tiny[i], 1e-33) << i;
  }
}

// Inputs the host quantizers cannot honour give empty output instead of bytes that look valid:
// an infinite value made the per-tensor scale inf and every code NaN; a K that is not whole
// 128-blocks left its tail codes 0; a short x was read past its end.
TEST(Quantize, RefusedInputsGiveEmptyOutput) {
  EXPECT_TRUE(quantize_e4m3_per_tensor({1.0f, INFINITY, 2.0f}).codes.empty());
  EXPECT_TRUE(quantize_e4m3_per_tensor({1.0f, NAN}).codes.empty());
  const std::vector<float> x(2 * 200, 1.0f);
  const auto partial = quantize_e4m3_rows_1x128(x, 2, 200);
  EXPECT_TRUE(partial.codes.empty() && partial.scales.empty());
  const auto short_x = quantize_e4m3_rows_1x128(x, 4, 128);  // 512 values needed
  EXPECT_TRUE(short_x.codes.empty() && short_x.scales.empty());
  const auto fine = quantize_e4m3_rows_1x128(std::vector<float>(2 * 256, 1.0f), 2, 256);
  EXPECT_EQ(fine.codes.size(), 512u);
  EXPECT_EQ(fine.scales.size(), 4u);
}

// Infinity once came out as 1.0 (frexp leaves no exponent for it).
TEST(FP16, InfinityNaNAndOverflow) {
  EXPECT_EQ(float_to_fp16(INFINITY), 0x7C00);
  EXPECT_EQ(float_to_fp16(-INFINITY), 0xFC00);
  EXPECT_EQ(float_to_fp16(NAN) & 0x7C00, 0x7C00);
  EXPECT_NE(float_to_fp16(NAN) & 0x03FF, 0);
  EXPECT_EQ(float_to_fp16(70000.0f), 0x7C00);
  EXPECT_EQ(float_to_fp16(65504.0f), 0x7BFF);
  EXPECT_EQ(float_to_fp16(-0.0f), 0x8000);
  EXPECT_EQ(float_to_fp16(1.0f), 0x3C00);
}
