// NVFP4 GEMM (W4A16 and NVFP4 x NVFP4) on the GPU against an FP64 CPU reference over the same
// dequantized operands. Skips (with the reason) when there is no Hopper GPU. Label: gpu.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "formats/bf16.h"
#include "formats/e4m3.h"
#include "formats/nvfp4.h"
#include "lowbit/device.h"
#include "lowbit/gemm.h"
#include "lowbit/nvfp4.h"
#include "gpu_test_util.h"
#include "test_seed.h"

using namespace lowbit;

namespace {

class Nvfp4GemmGpu : public lowbit_test::HopperTest {};
using lowbit_test::Buf;


// Codes of the small-integer E2M1 values {0, +-1, +-2, +-3, +-4, +-6}.
const uint8_t kIntCodes[] = {0x0, 0x2, 0x4, 0x5, 0x6, 0x7, 0xA, 0xC, 0xD, 0xE, 0xF};

// An NVFP4 tensor in the host reference's form, built from codes (small integers) or by
// quantizing random floats with the standard recipe.
formats::Nvfp4Tensor make_nvfp4(int64_t rows, int64_t cols, bool ints, std::mt19937_64& rng) {
  if (!ints) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(rows * cols));
    for (auto& v : x) v = nd(rng);
    return formats::quantize_nvfp4(x.data(), rows, cols);
  }
  formats::Nvfp4Tensor t;
  t.rows = rows;
  t.cols = cols;
  t.packed.resize(static_cast<size_t>(rows * cols / 2));
  t.scales.resize(static_cast<size_t>(rows * cols / 16));
  for (auto& b : t.packed) b = static_cast<uint8_t>(kIntCodes[rng() % 11] | (kIntCodes[rng() % 11] << 4));
  // Scales 0.5, 1, 2 keep every product and sum an exact small multiple of 0.5.
  const uint8_t sc[] = {0x30, 0x38, 0x40};
  for (auto& s : t.scales) s = sc[rng() % 3];
  t.global_scale = 1.0f;
  return t;
}

struct Case {
  int64_t m, n, k;
  bool ints;
  bool fp4_act;         // NVFP4 activations (else BF16)
  bool swizzled;        // weight scales handed to the prepack in the 128x4 swizzled layout
  const char* config;   // nullptr: the chooser
};

std::string name(const Case& c) {
  return std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k) + (c.ints ? " ints" : " random") +
         (c.fp4_act ? " nvfp4-act" : " bf16-act") + (c.swizzled ? " swizzled" : "") +
         " cfg=" + (c.config ? c.config : "auto");
}

// Runs one case; every output element is checked (the output is poisoned with NaN first).
void run_case(const Case& c) {
  SCOPED_TRACE(name(c));
  const uint64_t seed = lowbit_test::seed() * 31 + static_cast<uint64_t>(c.m * 7 + c.n * 3 + c.k);
  std::mt19937_64 rng(seed);
  const formats::Nvfp4Tensor w = make_nvfp4(c.n, c.k, c.ints, rng);
  const std::vector<float> wd = formats::dequantize_nvfp4(w);  // includes the global scale

  // Activations: BF16, or NVFP4 whose dequantized values the reference uses.
  std::vector<float> ad(static_cast<size_t>(c.m * c.k));
  std::vector<uint16_t> a_bf16;
  formats::Nvfp4Tensor a4;
  if (c.fp4_act) {
    a4 = make_nvfp4(c.m, c.k, c.ints, rng);
    ad = formats::dequantize_nvfp4(a4);
  } else {
    a_bf16.resize(ad.size());
    std::uniform_int_distribution<int> di(-4, 4);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (size_t i = 0; i < ad.size(); ++i) {
      a_bf16[i] = formats::float_to_bf16(c.ints ? static_cast<float>(di(rng)) : nd(rng));
      ad[i] = formats::bf16_to_float(a_bf16[i]);
    }
  }

  // Device buffers.
  Buf packed(w.packed.size()), scales(formats::nvfp4_scales_swizzled_bytes(c.n, c.k / 16) + w.scales.size());
  packed.upload(w.packed);
  if (c.swizzled) {
    std::vector<uint8_t> sw = formats::swizzle_nvfp4_scales(w.scales.data(), c.n, c.k / 16);
    scales.upload(sw);
  } else {
    scales.upload(w.scales);
  }
  const size_t pre_bytes = nvfp4_prepacked_bytes(c.n, c.k);
  Buf pre(pre_bytes);
  Nvfp4PrepackArgs pa;
  pa.n = c.n;
  pa.k = c.k;
  pa.packed = packed.p;
  pa.scales = scales.p;
  pa.scales_swizzled = c.swizzled;
  pa.out = pre.p;
  pa.out_bytes = pre_bytes;
  ASSERT_TRUE(nvfp4_prepack_weights(pa, nullptr).ok());

  Buf abuf(c.fp4_act ? a4.packed.size() : a_bf16.size() * 2), ascales(c.fp4_act ? a4.scales.size() : 16);
  if (c.fp4_act) {
    abuf.upload(a4.packed);
    ascales.upload(a4.scales);
  } else {
    abuf.upload(a_bf16);
  }
  Buf d(static_cast<size_t>(c.m * c.n * 2));
  CUDA_OK(cudaMemset(d.p, 0xFF, d.bytes));  // NaN poison

  Nvfp4GemmConfig cfg;
  const bool forced = c.config != nullptr;
  if (forced) ASSERT_TRUE(parse_nvfp4_config(c.config, &cfg).ok());
  else ASSERT_TRUE(choose_nvfp4_config(c.m, c.n, c.k, &cfg).ok());
  const size_t ws_bytes = nvfp4_gemm_workspace_size(c.m, c.n, c.k, c.fp4_act, cfg);
  Buf ws(ws_bytes);
  ASSERT_TRUE(workspace_init(ws.p, ws_bytes, nullptr).ok());

  Nvfp4GemmArgs ga;
  ga.m = c.m;
  ga.n = c.n;
  ga.k = c.k;
  if (c.fp4_act) {
    ga.a_packed = abuf.p;
    ga.a_scales = ascales.p;
    ga.a_global_scale = a4.global_scale;
  } else {
    ga.a_bf16 = abuf.p;
  }
  ga.b_prepacked = pre.p;
  ga.b_global_scale = w.global_scale;
  ga.d = d.p;
  ga.workspace = ws.p;
  ga.workspace_bytes = ws_bytes;
  const Status st = nvfp4_gemm(ga, nullptr, forced ? &cfg : nullptr);
  ASSERT_TRUE(st.ok()) << st.to_string();
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<uint16_t> out(static_cast<size_t>(c.m * c.n));
  CUDA_OK(cudaMemcpy(out.data(), d.p, out.size() * 2, cudaMemcpyDeviceToHost));

  // FP64 reference over the dequantized operands. Bound for random inputs: the BF16 rounding of
  // the output (2^-8 relative) plus FP32 accumulation over K terms (K * 2^-24 of sum |a w|).
  int bad = 0;
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t j = 0; j < c.n; ++j) {
      double ref = 0.0, mag = 0.0;
      for (int64_t kk = 0; kk < c.k; ++kk) {
        const double p = static_cast<double>(ad[i * c.k + kk]) * wd[j * c.k + kk];
        ref += p;
        mag += std::fabs(p);
      }
      const float got = formats::bf16_to_float(out[i * c.n + j]);
      bool ok;
      if (c.ints) {
        ok = got == formats::bf16_to_float(formats::float_to_bf16(static_cast<float>(ref)));
      } else {
        const double tol = std::ldexp(std::fabs(ref), -8) + static_cast<double>(c.k) * std::ldexp(mag, -24);
        ok = std::isfinite(got) && std::fabs(got - ref) <= tol;
      }
      if (!ok && ++bad <= 5)
        ADD_FAILURE() << "D[" << i << "," << j << "] = " << got << ", reference " << ref << " (seed " << seed << ")";
    }
  EXPECT_EQ(bad, 0) << "mismatching elements";
}

TEST_F(Nvfp4GemmGpu, SmallIntegersExactEveryVariant) {
  for (const char* cfg : {"tokens=16", "tokens=32", "tokens=64", "tokens=128", "tokens=16,splits=3", "tokens=64,splits=2",
                          "tokens=128,splits=4"})
    run_case({100, 272, 1024, true, false, false, cfg});
}

TEST_F(Nvfp4GemmGpu, EdgeShapesExact) {
  const int64_t ms[] = {1, 3, 17, 127, 129};
  for (int64_t m : ms) run_case({m, 144, 160, true, false, false, nullptr});
  run_case({5, 16, 32, true, false, false, nullptr});
  run_case({33, 48, 96, true, false, true, "tokens=32,splits=1"});
  run_case({64, 400, 4096, true, false, true, nullptr});
}

TEST_F(Nvfp4GemmGpu, Nvfp4ActivationsExact) {
  run_case({16, 256, 512, true, true, false, nullptr});
  run_case({130, 128, 384, true, true, true, "tokens=64,splits=2"});
}

TEST_F(Nvfp4GemmGpu, RandomWithinBound) {
  run_case({16, 1024, 2048, false, false, false, nullptr});
  run_case({128, 512, 4096, false, true, true, nullptr});
  run_case({7, 384, 7168, false, false, true, "tokens=16,splits=8"});
}

TEST_F(Nvfp4GemmGpu, RejectsBadInput) {
  Buf x(1 << 20), pre(1 << 20), d(1 << 20);
  Nvfp4GemmArgs ok;
  ok.m = 16;
  ok.n = 128;
  ok.k = 256;
  ok.a_bf16 = x.p;
  ok.b_prepacked = pre.p;
  ok.d = d.p;
  auto expect_bad = [&](Nvfp4GemmArgs a, const char* what) {
    const Status st = nvfp4_gemm(a, nullptr);
    EXPECT_FALSE(st.ok()) << what;
    EXPECT_FALSE(st.message().empty()) << what;
  };
  Nvfp4GemmArgs a = ok;
  a.k = 48;
  expect_bad(a, "K not a multiple of 32");
  a = ok;
  a.n = 40;
  expect_bad(a, "N not a multiple of 16");
  a = ok;
  a.m = 0;
  expect_bad(a, "M = 0");
  a = ok;
  a.d = static_cast<char*>(d.p) + 8;
  expect_bad(a, "misaligned D");
  a = ok;
  a.a_packed = x.p;
  expect_bad(a, "both activation forms");
  a = ok;
  a.a_bf16 = nullptr;
  a.a_packed = x.p;
  expect_bad(a, "packed activations without scales");
  a = ok;
  a.b_global_scale = std::nanf("");
  expect_bad(a, "non-finite global scale");
  a = ok;
  a.b_global_scale = 0.0f;
  expect_bad(a, "zero global scale");
  a = ok;
  Nvfp4GemmConfig cfg;
  ASSERT_TRUE(parse_nvfp4_config("tokens=16,splits=2", &cfg).ok());
  EXPECT_EQ(nvfp4_gemm(a, nullptr, &cfg).code(), StatusCode::kWorkspaceTooSmall);
  EXPECT_FALSE(parse_nvfp4_config("tokens=24", &cfg).ok());
  Nvfp4PrepackArgs pa;
  pa.n = 128;
  pa.k = 48;
  pa.packed = x.p;
  pa.scales = x.p;
  pa.out = pre.p;
  pa.out_bytes = pre.bytes;
  EXPECT_FALSE(nvfp4_prepack_weights(pa, nullptr).ok()) << "prepack K not a multiple of 32";
  pa.k = 256;
  pa.out_bytes = 100;
  EXPECT_FALSE(nvfp4_prepack_weights(pa, nullptr).ok()) << "prepack output too small";
  CUDA_OK(cudaDeviceSynchronize());
}

}  // namespace
