// Per-token FP8 quantization on the GPU (lowbit/quantize.h) against the host rule: codes and
// scales bit-exact for plain rows; the SwiGLU form within the quantization step of the FP64
// activation. Label: gpu.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "formats/bf16.h"
#include "formats/e4m3.h"
#include "gpu_test_util.h"
#include "lowbit/quantize.h"
#include "test_seed.h"

using namespace lowbit;

namespace {

class QuantizeGpu : public lowbit_test::HopperTest {};
using lowbit_test::Buf;

// Rows of BF16 values with every regime in them: ordinary rows, a row of zeros, a row whose
// amax is one huge value among tiny ones, subnormal-E4M3 territory, and a row of one sign.
std::vector<uint16_t> make_rows(int64_t m, int64_t cols, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint16_t> x(m * cols);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      float v = normal(rng) * std::ldexp(1.0f, static_cast<int>(r % 7) - 3);
      if (r % 5 == 1) v = 0.0f;
      if (r % 5 == 2) v = c == 3 ? 3.0e4f : v * 1e-3f;
      if (r % 5 == 3) v = std::fabs(v);
      x[r * cols + c] = formats::float_to_bf16(v);
    }
  return x;
}

// The host rule of lowbit/quantize.h for one row of values.
void host_quantize(const std::vector<float>& v, uint8_t* q, float* scale) {
  float amax = 0.0f;
  for (float f : v) amax = std::max(amax, std::fabs(f));
  const float a = amax == 0.0f ? 448.0f : std::max(amax, 1e-30f);
  const float inv = 448.0f / a;
  *scale = a / 448.0f;
  for (size_t i = 0; i < v.size(); ++i) q[i] = formats::float_to_e4m3(v[i] * inv);
}

}  // namespace

TEST_F(QuantizeGpu, PerTokenCodesAndScalesExact) {
  for (int64_t m : {1, 3, 10, 129})
    for (int64_t k : {16, 48, 4096 + 16}) {
      const auto hx = make_rows(m, k, lowbit_test::seed() + m * 131 + k);
      Buf x(hx.size() * 2), q(m * k), s(m * 4);
      CUDA_OK(cudaMemcpy(x.p, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
      CUDA_OK(cudaMemset(q.p, 0xAB, m * k));
      CUDA_OK(cudaMemset(s.p, 0xFF, m * 4));  // NaN
      const Status st = quantize_fp8_per_token(x.p, m, k, q.p, static_cast<float*>(s.p), nullptr);
      ASSERT_TRUE(st.ok()) << st.to_string();
      std::vector<uint8_t> gq(m * k);
      std::vector<float> gs(m);
      CUDA_OK(cudaMemcpy(gq.data(), q.p, gq.size(), cudaMemcpyDeviceToHost));
      CUDA_OK(cudaMemcpy(gs.data(), s.p, m * 4, cudaMemcpyDeviceToHost));
      int64_t bad = 0;
      for (int64_t r = 0; r < m; ++r) {
        std::vector<float> row(k);
        for (int64_t c = 0; c < k; ++c) row[c] = formats::bf16_to_float(hx[r * k + c]);
        std::vector<uint8_t> want(k);
        float want_scale = 0.0f;
        host_quantize(row, want.data(), &want_scale);
        EXPECT_EQ(gs[r], want_scale) << "m=" << m << " k=" << k << " row " << r;
        for (int64_t c = 0; c < k; ++c)
          if (gq[r * k + c] != want[c] && bad++ < 5)
            ADD_FAILURE() << "m=" << m << " k=" << k << " (" << r << ", " << c << "): code " << int(gq[r * k + c])
                          << ", want " << int(want[c]);
      }
      EXPECT_EQ(bad, 0);
    }
}

TEST_F(QuantizeGpu, SiluMulWithinOneQuantizationStep) {
  for (int64_t m : {1, 3, 129})
    for (int64_t inter : {16, 14336}) {
      const auto hx = make_rows(m, 2 * inter, lowbit_test::seed() + m * 7 + inter);
      Buf x(hx.size() * 2), q(m * inter), s(m * 4);
      CUDA_OK(cudaMemcpy(x.p, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
      CUDA_OK(cudaMemset(s.p, 0xFF, m * 4));
      const Status st = silu_mul_quantize_fp8_per_token(x.p, m, inter, q.p, static_cast<float*>(s.p), nullptr);
      ASSERT_TRUE(st.ok()) << st.to_string();
      std::vector<uint8_t> gq(m * inter);
      std::vector<float> gs(m);
      CUDA_OK(cudaMemcpy(gq.data(), q.p, gq.size(), cudaMemcpyDeviceToHost));
      CUDA_OK(cudaMemcpy(gs.data(), s.p, m * 4, cudaMemcpyDeviceToHost));
      int64_t bad = 0;
      for (int64_t r = 0; r < m; ++r) {
        std::vector<double> v(inter);
        double amax = 0.0;
        for (int64_t c = 0; c < inter; ++c) {
          const double g = formats::bf16_to_float(hx[r * 2 * inter + c]);
          const double u = formats::bf16_to_float(hx[r * 2 * inter + inter + c]);
          v[c] = g / (1.0 + std::exp(-g)) * u;
          amax = std::max(amax, std::fabs(v[c]));
        }
        const double want_scale = amax == 0.0 ? 1.0 : std::max(amax, 1e-30) / 448.0;
        EXPECT_NEAR(gs[r], want_scale, 1e-5 * want_scale) << "row " << r;
        // E4M3 rounds to 3 mantissa bits: half a step is 1/16 of the value (normal range), or
        // 2^-10 of the scale (subnormal); the SiLU's FP32 math adds far less.
        for (int64_t c = 0; c < inter; ++c) {
          const double got = formats::e4m3_to_float(gq[r * inter + c]) * gs[r];
          const double tol = std::fabs(v[c]) / 16.0 * 1.01 + std::ldexp(want_scale, -10) * 1.01 + 1e-30;
          if (!(std::fabs(got - v[c]) <= tol) && bad++ < 5)
            ADD_FAILURE() << "m=" << m << " inter=" << inter << " (" << r << ", " << c << "): " << got << ", want "
                          << v[c];
        }
      }
      EXPECT_EQ(bad, 0);
    }
}

// A non-finite input makes its row's scale and codes NaN (a GEMM on them gives NaN, not a
// plausible number); the other rows are untouched by it.
TEST_F(QuantizeGpu, NonFiniteRowBecomesNaN) {
  const int64_t m = 3, k = 32;
  std::vector<uint16_t> hx(m * k, formats::float_to_bf16(1.0f));
  hx[1 * k + 5] = 0x7FC0;  // NaN
  Buf x(hx.size() * 2), q(m * k), s(m * 4);
  CUDA_OK(cudaMemcpy(x.p, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
  ASSERT_TRUE(quantize_fp8_per_token(x.p, m, k, q.p, static_cast<float*>(s.p), nullptr).ok());
  std::vector<float> gs(m);
  std::vector<uint8_t> gq(m * k);
  CUDA_OK(cudaMemcpy(gs.data(), s.p, m * 4, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(gq.data(), q.p, gq.size(), cudaMemcpyDeviceToHost));
  EXPECT_EQ(gs[0], 1.0f / 448.0f);
  EXPECT_TRUE(std::isnan(gs[1]));
  EXPECT_EQ(gs[2], 1.0f / 448.0f);
  for (int64_t c = 0; c < k; ++c) EXPECT_EQ(gq[k + c] & 0x7F, 0x7F) << c;
  EXPECT_EQ(gq[0], formats::float_to_e4m3(448.0f));
}

TEST_F(QuantizeGpu, RejectsBadArguments) {
  Buf x(64 * 64 * 2), q(64 * 64), s(64 * 4);
  float* sp = static_cast<float*>(s.p);
  auto invalid = [](const Status& st, const char* what) {
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << what << ": " << st.to_string();
    EXPECT_EQ(cudaGetLastError(), cudaSuccess) << what;
  };
  invalid(quantize_fp8_per_token(x.p, 4, 24, q.p, sp, nullptr), "K not a multiple of 16");
  invalid(quantize_fp8_per_token(x.p, 0, 32, q.p, sp, nullptr), "M = 0");
  invalid(quantize_fp8_per_token(nullptr, 4, 32, q.p, sp, nullptr), "null x");
  invalid(quantize_fp8_per_token(x.p, 4, 32, q.p, nullptr, nullptr), "null scales");
  invalid(quantize_fp8_per_token(static_cast<char*>(x.p) + 8, 4, 32, q.p, sp, nullptr), "misaligned x");
  std::vector<uint8_t> host(64 * 64);
  invalid(quantize_fp8_per_token(x.p, 4, 32, host.data(), sp, nullptr), "pageable host q");
  invalid(quantize_fp8_per_token(x.p, 4, 32, x.p, sp, nullptr), "q overlapping x");
  invalid(silu_mul_quantize_fp8_per_token(x.p, 4, 40, q.p, sp, nullptr), "inter not a multiple of 16");
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess) << "the context survives";
}
