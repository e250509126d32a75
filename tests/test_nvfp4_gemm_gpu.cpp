// NVFP4 GEMM (W4A16 and NVFP4 x NVFP4) on the GPU against an FP64 CPU reference over the same
// dequantized operands. Skips (with the reason) when there is no Hopper GPU. Label: gpu.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
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

// Scale bytes no quantizer writes, as a checkpoint could still hold them: a set sign bit (0x80
// alone is -0), and 0x7F / 0xFF, E4M3's NaN. NVFP4 scale bytes are unsigned magnitudes and 0x7F
// reads as 480 (formats::nvfp4_scale_to_float): one block per row gets one of them. Few enough
// that the small-integer sums stay exact in FP32.
void use_odd_scales(formats::Nvfp4Tensor& t) {
  const uint8_t odd[] = {0xB8, 0xC0, 0x7F, 0xFF, 0x80, 0xB0};
  const int64_t kb = t.cols / 16;
  for (int64_t r = 0; r < t.rows; ++r) t.scales[static_cast<size_t>(r * kb + r % kb)] = odd[r % 6];
}

// Only E4M3 subnormal scales (0x01..0x07: 1..7 x 2^-9), which the quantizer writes for small
// blocks: a flush to zero in either operand's decode would zero those blocks. The products stay
// multiples of 2^-20 and small, so the FP32 sums stay exact.
void use_subnormal_scales(formats::Nvfp4Tensor& t, std::mt19937_64& rng) {
  for (auto& s : t.scales) s = static_cast<uint8_t>(1 + rng() % 7);
}

// One problem's operands on the host (the reference's dequantized values) and on the device
// (raw NVFP4 weights prepacked, activations in BF16 or NVFP4, D poisoned with NaN).
struct Operands {
  int64_t m = 0, n = 0, k = 0;
  bool ints = true, fp4_act = false;
  uint64_t seed = 0;
  formats::Nvfp4Tensor w, a4;
  std::vector<float> wd, ad;
  std::vector<uint16_t> a_bf16;
  std::unique_ptr<Buf> pre, abuf, ascales, d;

  void make(int64_t m_, int64_t n_, int64_t k_, bool ints_, bool fp4_act_, bool swizzled, uint64_t seed_,
            bool odd_scales = false, bool subnormal_scales = false) {
    m = m_, n = n_, k = k_, ints = ints_, fp4_act = fp4_act_, seed = seed_;
    std::mt19937_64 rng(seed);
    w = make_nvfp4(n, k, ints, rng);
    if (odd_scales) use_odd_scales(w);
    if (subnormal_scales) use_subnormal_scales(w, rng);
    wd = formats::dequantize_nvfp4(w);  // includes the global scale
    // Activations: BF16, or NVFP4 whose dequantized values the reference uses.
    ad.assign(static_cast<size_t>(m * k), 0.0f);
    if (fp4_act) {
      if (m > 0) {
        a4 = make_nvfp4(m, k, ints, rng);
        if (odd_scales) use_odd_scales(a4);
        if (subnormal_scales) use_subnormal_scales(a4, rng);
        ad = formats::dequantize_nvfp4(a4);
      }
    } else {
      a_bf16.resize(ad.size());
      std::uniform_int_distribution<int> di(-4, 4);
      std::normal_distribution<float> nd(0.0f, 1.0f);
      for (size_t i = 0; i < ad.size(); ++i) {
        a_bf16[i] = formats::float_to_bf16(ints ? static_cast<float>(di(rng)) : nd(rng));
        ad[i] = formats::bf16_to_float(a_bf16[i]);
      }
    }
    Buf packed(w.packed.size()), scales(formats::nvfp4_scales_swizzled_bytes(n, k / 16) + w.scales.size());
    packed.upload(w.packed);
    if (swizzled) scales.upload(formats::swizzle_nvfp4_scales(w.scales.data(), n, k / 16));
    else scales.upload(w.scales);
    const size_t pre_bytes = nvfp4_prepacked_bytes(n, k);
    pre = std::make_unique<Buf>(pre_bytes);
    Nvfp4PrepackArgs pa;
    pa.n = n;
    pa.k = k;
    pa.packed = packed.p;
    pa.scales = scales.p;
    pa.scales_swizzled = swizzled;
    pa.out = pre->p;
    pa.out_bytes = pre_bytes;
    ASSERT_TRUE(nvfp4_prepack_weights(pa, nullptr).ok());
    CUDA_OK(cudaDeviceSynchronize());  // the source buffers go out of scope
    abuf = std::make_unique<Buf>(fp4_act ? a4.packed.size() : a_bf16.size() * 2);
    ascales = std::make_unique<Buf>(fp4_act ? a4.scales.size() : 16);
    if (fp4_act) {
      abuf->upload(a4.packed);
      ascales->upload(a4.scales);
    } else {
      abuf->upload(a_bf16);
    }
    d = std::make_unique<Buf>(static_cast<size_t>(m * n * 2));
    CUDA_OK(cudaMemset(d->p, 0xFF, d->bytes));  // NaN poison
  }

  float a_global() const { return fp4_act ? a4.global_scale : 1.0f; }

  // Global scales other than the 1 make() sets (powers of two keep small-integer results exact);
  // the reference's dequantized values follow. Only NVFP4 activations have one.
  void set_global_scales(float a_gs, float w_gs) {
    w.global_scale = w_gs;
    wd = formats::dequantize_nvfp4(w);
    if (fp4_act && m > 0) {
      a4.global_scale = a_gs;
      ad = formats::dequantize_nvfp4(a4);
    }
  }

  Nvfp4GroupedProblem descriptor() const {
    Nvfp4GroupedProblem g{};
    g.m = static_cast<int32_t>(m);
    g.n = static_cast<int32_t>(n);
    g.k = static_cast<int32_t>(k);
    g.a = abuf->p;
    g.a_scales = fp4_act ? ascales->p : nullptr;
    g.b_prepacked = pre->p;
    g.d = d->p;
    g.a_global_scale = fp4_act ? a4.global_scale : 1.0f;
    g.b_global_scale = w.global_scale;
    return g;
  }

  std::vector<uint16_t> read() const {
    std::vector<uint16_t> out(static_cast<size_t>(m * n));
    EXPECT_EQ(cudaMemcpy(out.data(), d->p, out.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }

  // Every element against the FP64 reference over the dequantized operands. Small integers:
  // exact (the BF16 rounding of the exact sum). Random: the BF16 rounding of the output (2^-8
  // relative) plus FP32 accumulation over K terms (K * 2^-24 of sum |a w|).
  void check(const std::string& what) const {
    SCOPED_TRACE(what + " (seed " + std::to_string(seed) + ")");
    const std::vector<uint16_t> out = read();
    int bad = 0;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double ref = 0.0, mag = 0.0;
        for (int64_t kk = 0; kk < k; ++kk) {
          const double p = static_cast<double>(ad[i * k + kk]) * wd[j * k + kk];
          ref += p;
          mag += std::fabs(p);
        }
        const float got = formats::bf16_to_float(out[i * n + j]);
        bool ok;
        if (ints) {
          ok = got == formats::bf16_to_float(formats::float_to_bf16(static_cast<float>(ref)));
        } else {
          const double tol = std::ldexp(std::fabs(ref), -8) + static_cast<double>(k) * std::ldexp(mag, -24);
          ok = std::isfinite(got) && std::fabs(got - ref) <= tol;
        }
        if (!ok && ++bad <= 5) ADD_FAILURE() << "D[" << i << "," << j << "] = " << got << ", reference " << ref;
      }
    EXPECT_EQ(bad, 0) << "mismatching elements";
  }

  int64_t written() const {
    int64_t c = 0;
    for (uint16_t v : read()) c += std::isnan(formats::bf16_to_float(v)) ? 0 : 1;
    return c;
  }
};

struct Case {
  int64_t m, n, k;
  bool ints;
  bool fp4_act;         // NVFP4 activations (else BF16)
  bool swizzled;        // weight scales handed to the prepack in the 128x4 swizzled layout
  const char* config;   // nullptr: the chooser
  void* workspace = nullptr;  // shared across cases (zero-filled once by the caller), or null: one per case
  size_t workspace_bytes = 0;
  bool odd_scales = false;    // use_odd_scales on both operands
  float a_global = 1.0f, w_global = 1.0f;  // Operands::set_global_scales
  bool subnormal_scales = false;           // use_subnormal_scales on both operands
};

std::string name(const Case& c) {
  return std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k) + (c.ints ? " ints" : " random") +
         (c.fp4_act ? " nvfp4-act" : " bf16-act") + (c.swizzled ? " swizzled" : "") +
         " cfg=" + (c.config ? c.config : "auto") +
         (c.a_global != 1.0f || c.w_global != 1.0f
              ? " global " + std::to_string(c.a_global) + " x " + std::to_string(c.w_global)
              : "");
}

// Runs one dense case; every output element is checked (the output is poisoned first).
void run_case(const Case& c) {
  SCOPED_TRACE(name(c));
  Operands o;
  o.make(c.m, c.n, c.k, c.ints, c.fp4_act, c.swizzled,
         lowbit_test::seed() * 31 + static_cast<uint64_t>(c.m * 7 + c.n * 3 + c.k), c.odd_scales, c.subnormal_scales);
  if (::testing::Test::HasFatalFailure()) return;
  // (Random operands keep the global scales their quantizer chose.)
  if (c.a_global != 1.0f || c.w_global != 1.0f) o.set_global_scales(c.a_global, c.w_global);

  Nvfp4GemmConfig cfg;
  const bool forced = c.config != nullptr;
  if (forced) ASSERT_TRUE(parse_nvfp4_config(c.config, &cfg).ok());
  else ASSERT_TRUE(choose_nvfp4_config(c.m, c.n, c.k, &cfg).ok());
  const size_t ws_bytes = c.workspace ? c.workspace_bytes : nvfp4_gemm_workspace_size(c.m, c.n, c.k, c.fp4_act, cfg);
  Buf own_ws(c.workspace ? 0 : ws_bytes);
  void* ws_p = c.workspace ? c.workspace : own_ws.p;
  if (!c.workspace) {
    ASSERT_TRUE(workspace_init(ws_p, ws_bytes, nullptr).ok());
  }

  Nvfp4GemmArgs ga;
  ga.m = c.m;
  ga.n = c.n;
  ga.k = c.k;
  if (c.fp4_act) {
    ga.a_packed = o.abuf->p;
    ga.a_scales = o.ascales->p;
    ga.a_global_scale = o.a4.global_scale;
  } else {
    ga.a_bf16 = o.abuf->p;
  }
  ga.b_prepacked = o.pre->p;
  ga.b_global_scale = o.w.global_scale;
  ga.d = o.d->p;
  ga.workspace = ws_p;
  ga.workspace_bytes = ws_bytes;
  const Status st = nvfp4_gemm(ga, nullptr, forced ? &cfg : nullptr);
  ASSERT_TRUE(st.ok()) << st.to_string();
  CUDA_OK(cudaDeviceSynchronize());
  o.check(name(c));
}

// The chooser's rule (docs/perf.md W4 v4): K is split only into one wave of units (units <= SMs,
// >= 4 K blocks each), to the largest fill such a split reaches; tiles that alone exceed a
// wave are not split.
// One workspace, zero-filled once, shared by calls that stage NVFP4 activations and calls that
// split K: the staged activations must never land on the split calls' tile counters (they used
// to start at byte 0, where the next split call read them as counters).
TEST_F(Nvfp4GemmGpu, CallsShareOneWorkspace) {
  const size_t bytes = size_t(64) << 20;
  Buf ws(bytes);
  ASSERT_TRUE(workspace_init(ws.p, bytes, nullptr).ok());
  const Case cases[] = {
      {300, 512, 1024, true, true, false, "tokens=128,splits=1"},  // stages activations, no split
      {16, 1024, 2048, true, false, false, "tokens=16,splits=4"},
      {200, 768, 2048, true, true, false, "tokens=64,splits=3"},   // both
      {16, 1024, 2048, true, false, false, "tokens=16,splits=4"},
  };
  for (Case c : cases) {
    c.workspace = ws.p;
    c.workspace_bytes = bytes;
    run_case(c);
  }
}

TEST_F(Nvfp4GemmGpu, ChooserSplitsIntoOneWave) {
  DeviceInfo dev;
  ASSERT_TRUE(require_hopper(&dev).ok());
  const int64_t shapes[][3] = {{1, 7168, 16384}, {16, 7168, 16384}, {128, 4096, 7168}, {128, 7168, 2048},
                               {512, 7168, 16384}, {4096, 7168, 16384}, {64, 256, 512},  {7, 384, 7168},
                               {192, 3072, 4096}, {320, 3072, 4096},  {384, 4096, 1536}};
  for (const auto& sh : shapes) {
    const int64_t m = sh[0], n = sh[1], k = sh[2];
    Nvfp4GemmConfig c;
    ASSERT_TRUE(choose_nvfp4_config(m, n, k, &c).ok());
    SCOPED_TRACE(std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) + ": " + c.reason);
    const int64_t tiles = ((n + 127) / 128) * ((m + c.block_tokens - 1) / c.block_tokens);
    const int64_t kb = (k + 127) / 128;
    EXPECT_GE(c.block_tokens, std::min<int64_t>(m, 128));
    // 256-token tiles run unsplit (split, they measured 1.4x slower than 128; docs/perf.md W4 v6),
    // and win where the 128-token tiles take many waves.
    if (c.block_tokens == 256) {
      EXPECT_EQ(c.splits, 1);
    }
    if (m == 4096) {
      EXPECT_EQ(c.block_tokens, 256);
    }
    if (c.block_tokens == 256) continue;
    if (tiles >= dev.sm_count) {
      EXPECT_EQ(c.splits, 1);
      continue;
    }
    EXPECT_LE(tiles * c.splits, dev.sm_count);
    if (c.splits > 1) {
      EXPECT_GE(kb / c.splits, 4);
    }
    // No other admissible split fills the wave better.
    for (int s = 1; s <= 16 && kb / s >= 4 && tiles * s <= dev.sm_count; ++s) EXPECT_LE(tiles * s, tiles * c.splits);
  }
}

// ---- grouped ---------------------------------------------------------------------------------

struct Grouped {
  std::vector<std::unique_ptr<Operands>> ops;
  std::unique_ptr<Buf> problems;
  std::unique_ptr<Buf> ws;
  size_t ws_bytes = 0;
  bool fp4_act = false;
  int64_t act_elems = 0;
  bool pdl_first = true;  // Nvfp4GroupedArgs::pdl_first

  void add(int64_t m, int64_t n, int64_t k, bool ints, bool fp4, uint64_t salt) {
    fp4_act = fp4;
    ops.emplace_back(new Operands);
    ops.back()->make(m, n, k, ints, fp4, salt % 2 == 1, lowbit_test::seed() * 131 + salt);
    act_elems += m * k;
  }
  std::vector<Nvfp4GroupedProblem> descriptors() const {
    std::vector<Nvfp4GroupedProblem> h;
    for (const auto& o : ops) h.push_back(o->descriptor());
    return h;
  }
  void upload(const std::vector<Nvfp4GroupedProblem>& h) {
    const size_t bytes = h.size() * sizeof(Nvfp4GroupedProblem);
    if (!problems || problems->bytes < bytes) problems = std::make_unique<Buf>(bytes);
    CUDA_OK(cudaMemcpy(problems->p, h.data(), bytes, cudaMemcpyHostToDevice));
  }
  Nvfp4GroupedArgs args(int64_t capacity) {
    ws_bytes = nvfp4_grouped_workspace_size(static_cast<int>(ops.size()), capacity);
    ws = std::make_unique<Buf>(ws_bytes);
    Nvfp4GroupedArgs a;
    a.problems = static_cast<const Nvfp4GroupedProblem*>(problems->p);
    a.groups = static_cast<int>(ops.size());
    a.nvfp4_activations = fp4_act;
    a.max_activation_elements = capacity;
    a.pdl_first = pdl_first;
    a.workspace = ws->p;
    a.workspace_bytes = ws_bytes;
    return a;
  }
  // Runs once with every group's descriptor and checks every element of every group.
  void run_and_check(const char* config, const std::string& what) {
    upload(descriptors());
    const Nvfp4GroupedArgs a = args(act_elems);
    Nvfp4GemmConfig cfg;
    if (config) {
      ASSERT_TRUE(parse_nvfp4_config(config, &cfg).ok());
    }
    const Status st = nvfp4_grouped_gemm(a, nullptr, config ? &cfg : nullptr);
    ASSERT_TRUE(st.ok()) << st.to_string();
    const Status cs = nvfp4_grouped_check_status(a.workspace, nullptr);
    ASSERT_TRUE(cs.ok()) << cs.to_string();
    for (size_t g = 0; g < ops.size(); ++g)
      ops[g]->check(what + " cfg=" + (config ? config : "auto") + " group " + std::to_string(g) + " m=" +
                    std::to_string(ops[g]->m));
  }
};

TEST_F(Nvfp4GemmGpu, SmallIntegersExactEveryVariant) {
  for (const char* cfg : {"tokens=16", "tokens=32", "tokens=64", "tokens=128", "tokens=256", "tokens=16,splits=3",
                          "tokens=64,splits=2", "tokens=128,splits=4", "tokens=256,splits=3"})
    run_case({100, 272, 1024, true, false, false, cfg});
}

// 256 tokens stage the output tile in the ring: two token tiles (the second partial), more
// K blocks than stages, NVFP4 activations and a split.
TEST_F(Nvfp4GemmGpu, Tokens256Exact) {
  run_case({300, 400, 1024, true, false, false, "tokens=256"});
  run_case({513, 144, 160, true, true, true, "tokens=256"});
  run_case({257, 256, 2048, true, false, true, "tokens=256,splits=2"});
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

// NVFP4 activations at the edge token counts through every token tile (and a split), with
// global scales other than 1 on both operands: the activation staging and the epilogue must
// each apply their own.
TEST_F(Nvfp4GemmGpu, Nvfp4ActivationsEdgeShapesEveryTileExact) {
  for (const char* cfg : {static_cast<const char*>(nullptr), "tokens=16", "tokens=32", "tokens=64,splits=2",
                          "tokens=128", "tokens=256"})
    for (int64_t m : {1, 3, 127, 129}) {
      Case c{m, 144, 512, true, true, m % 2 == 1, cfg};
      c.a_global = 0.25f;
      c.w_global = 8.0f;
      run_case(c);
      if (HasFailure()) return;
    }
}

// The weights (decoded by bit placement in the GEMM's registers) and the activations (staged
// to BF16 by a separate kernel) read every scale byte alike, sign bit and 0x7F included: the
// activations once decoded 0x7F as NaN and a set sign bit as negative, the weights did not.
TEST_F(Nvfp4GemmGpu, ScaleBytesDecodeAlikeInBothOperands) {
  Case c{48, 128, 512, true, true, false, nullptr};
  c.odd_scales = true;
  run_case(c);
  c.swizzled = true;
  c.config = "tokens=16,splits=2";
  run_case(c);
}

TEST_F(Nvfp4GemmGpu, SubnormalScalesExact) {
  for (const char* cfg : {static_cast<const char*>(nullptr), "tokens=16,splits=2", "tokens=256"}) {
    Case c{48, 128, 512, true, true, true, cfg};
    c.subnormal_scales = true;
    run_case(c);
    c.fp4_act = false;  // the weights' decode alone
    run_case(c);
  }
}

TEST_F(Nvfp4GemmGpu, RandomWithinBound) {
  run_case({16, 1024, 2048, false, false, false, nullptr});
  run_case({128, 512, 4096, false, true, true, nullptr});
  run_case({7, 384, 7168, false, false, true, "tokens=16,splits=8"});
  run_case({512, 512, 4096, false, false, false, "tokens=256"});
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

// Empty groups, M = 1, 127, 129, and N and K differing per group, through every token tile.
TEST_F(Nvfp4GemmGpu, GroupedEdgeGroupsExact) {
  for (const char* cfg : {static_cast<const char*>(nullptr), "tokens=16", "tokens=32", "tokens=64"}) {
    Grouped g;
    const int64_t ms[] = {0, 1, 127, 129, 0, 40, 256};
    const int64_t ns[] = {128, 144, 256, 48, 128, 400, 128};
    const int64_t ks[] = {256, 160, 512, 96, 64, 1024, 128};
    for (int i = 0; i < 7; ++i) g.add(ms[i], ns[i], ks[i], true, false, 10 + i);
    g.run_and_check(cfg, "edge groups bf16-act");
    if (HasFailure()) return;
  }
}

// A group's last 128-token tile with at most 64 rows runs half-width MMAs: both sides of the
// boundary (64 / 65 rows left), tiles that are all remainder (1, 64) and none (128), with
// NVFP4 and BF16 activations.
TEST_F(Nvfp4GemmGpu, GroupedHalfWidthTilesExact) {
  for (bool fp4 : {true, false}) {
    Grouped g;
    const int64_t ms[] = {64, 65, 192, 193, 1, 128, 320};
    for (int i = 0; i < 7; ++i) g.add(ms[i], 256, 1024, true, fp4, 110 + i);
    g.run_and_check("tokens=128", fp4 ? "half-width tiles nvfp4-act" : "half-width tiles bf16-act");
    if (HasFailure()) return;
  }
}

// Each group's own global scales, powers of two whose products differ between groups: a kernel
// that read another group's scales, or one group's for all, is off by a power of two.
TEST_F(Nvfp4GemmGpu, GroupedPerGroupGlobalScalesExact) {
  for (const char* cfg : {static_cast<const char*>(nullptr), "tokens=16", "tokens=128"})
    for (bool fp4 : {true, false}) {
      Grouped g;
      const int64_t ms[] = {3, 129, 0, 64, 17};
      g.pdl_first = !fp4;  // the first kernel as a plain launch too
      for (int i = 0; i < 5; ++i) {
        g.add(ms[i], 144, 256, true, fp4, 200 + i);
        g.ops.back()->set_global_scales(std::ldexp(1.0f, i - 2), std::ldexp(1.0f, i % 3 - 1));
      }
      g.run_and_check(cfg, fp4 ? "per-group global scales nvfp4-act" : "per-group global scales bf16-act");
      if (HasFailure()) return;
    }
}

TEST_F(Nvfp4GemmGpu, GroupedNvfp4ActivationsExact) {
  Grouped g;
  const int64_t ms[] = {3, 0, 129, 64};
  const int64_t ks[] = {512, 256, 160, 2048};
  for (int i = 0; i < 4; ++i) g.add(ms[i], 272, ks[i], true, true, 20 + i);
  g.run_and_check(nullptr, "edge groups nvfp4-act");
}

TEST_F(Nvfp4GemmGpu, GroupedRandomWithinBound) {
  Grouped g;
  const int64_t ms[] = {80, 176, 17, 248};
  for (int i = 0; i < 4; ++i) g.add(ms[i], 512, 2048, false, true, 30 + i);
  g.run_and_check(nullptr, "random nvfp4-act");
  Grouped h;
  for (int i = 0; i < 3; ++i) h.add(ms[i], 384, 1024, false, false, 40 + i);
  h.run_and_check("tokens=64", "random bf16-act");
}

TEST_F(Nvfp4GemmGpu, GroupedManyTinyGroups) {
  Grouped g;
  for (int i = 0; i < 300; ++i) g.add(i % 4, 16 * (1 + i % 3), 32 * (1 + i % 2), true, true, 1000 + i);
  g.run_and_check("tokens=16", "300 tiny groups");
}

// Captured once, replayed after the descriptors were rewritten on the device: the second
// replay computes the new sizes and pointers (activation staging included).
TEST_F(Nvfp4GemmGpu, GroupedGraphReplayNewDescriptors) {
  Grouped first, second;
  const int64_t m1[] = {64, 0, 200, 17}, m2[] = {0, 130, 5, 256};
  for (int i = 0; i < 4; ++i) {
    first.add(m1[i], 256, 512, true, true, 50 + i);
    second.add(m2[i], 128 + 16 * i, 256 + 128 * (i % 2), true, true, 60 + i);
  }
  first.upload(first.descriptors());
  const Nvfp4GroupedArgs a = first.args(std::max(first.act_elems, second.act_elems));
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  const Status st = nvfp4_grouped_gemm(a, s);
  CUDA_OK(cudaStreamEndCapture(s, &graph));
  ASSERT_TRUE(st.ok()) << st.to_string();
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_OK(cudaGraphLaunch(exec, s));
  CUDA_OK(cudaStreamSynchronize(s));
  for (size_t g = 0; g < 4; ++g) first.ops[g]->check("graph replay 1 group " + std::to_string(g));
  const auto h2 = second.descriptors();
  CUDA_OK(cudaMemcpyAsync(first.problems->p, h2.data(), h2.size() * sizeof(Nvfp4GroupedProblem), cudaMemcpyHostToDevice, s));
  CUDA_OK(cudaGraphLaunch(exec, s));
  CUDA_OK(cudaStreamSynchronize(s));
  EXPECT_TRUE(nvfp4_grouped_check_status(a.workspace, s).ok());
  for (size_t g = 0; g < 4; ++g) second.ops[g]->check("graph replay 2 group " + std::to_string(g));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
}

// A bad descriptor on the device: that group is skipped (its D stays poisoned), the others are
// computed, the status word names it. Too little activation staging: nothing is computed and
// the status says why.
TEST_F(Nvfp4GemmGpu, GroupedBadDescriptorReported) {
  Grouped g;
  for (int i = 0; i < 3; ++i) g.add(100 + i, 128, 256, true, true, 70 + i);
  auto h = g.descriptors();
  h[1].b_global_scale = std::nanf("");
  EXPECT_FALSE(nvfp4_grouped_validate(h.data(), 3, true).ok());
  g.upload(h);
  Nvfp4GroupedArgs a = g.args(g.act_elems);
  ASSERT_TRUE(nvfp4_grouped_gemm(a, nullptr).ok());
  Status cs = nvfp4_grouped_check_status(a.workspace, nullptr);
  EXPECT_FALSE(cs.ok());
  EXPECT_NE(cs.message().find("group 1"), std::string::npos) << cs.to_string();
  g.ops[0]->check("bad-descriptor run group 0");
  g.ops[2]->check("bad-descriptor run group 2");
  EXPECT_EQ(g.ops[1]->written(), 0) << "the invalid group's output was written";

  Grouped small;
  for (int i = 0; i < 2; ++i) small.add(64, 128, 256, true, true, 80 + i);
  small.upload(small.descriptors());
  a = small.args(small.act_elems - 32);
  ASSERT_TRUE(nvfp4_grouped_gemm(a, nullptr).ok());
  cs = nvfp4_grouped_check_status(a.workspace, nullptr);
  EXPECT_FALSE(cs.ok());
  EXPECT_NE(cs.message().find("max_activation_elements"), std::string::npos) << cs.to_string();
  for (const auto& o : small.ops) EXPECT_EQ(o->written(), 0) << "a call without room for its activations wrote D";

  // Groups whose activation counts sum past 2^63 elements (each m * k ~ 2^61): the sums once
  // wrapped negative, passed the capacity check and dequantized far outside the workspace.
  Grouped big;
  for (int i = 0; i < 5; ++i) big.add(16, 128, 256, true, true, 90 + i);
  std::vector<Nvfp4GroupedProblem> huge = big.descriptors();
  for (auto& h : huge) {
    h.m = INT32_MAX;
    h.k = (1 << 30) - 32;
  }
  big.upload(huge);
  a = big.args(big.act_elems);
  ASSERT_TRUE(nvfp4_grouped_gemm(a, nullptr).ok());
  cs = nvfp4_grouped_check_status(a.workspace, nullptr);
  EXPECT_FALSE(cs.ok());
  EXPECT_NE(cs.message().find("max_activation_elements"), std::string::npos) << cs.to_string();
  for (const auto& o : big.ops) EXPECT_EQ(o->written(), 0) << "a call with overflowing activation counts wrote D";
}

TEST_F(Nvfp4GemmGpu, GroupedRejectsBadArguments) {
  Grouped g;
  g.add(16, 128, 256, true, false, 90);
  g.upload(g.descriptors());
  const Nvfp4GroupedArgs ok = g.args(0);
  auto expect_bad = [&](Nvfp4GroupedArgs a, const Nvfp4GemmConfig* cfg, const char* what) {
    const Status st = nvfp4_grouped_gemm(a, nullptr, cfg);
    EXPECT_FALSE(st.ok()) << what;
    EXPECT_FALSE(st.message().empty()) << what;
  };
  Nvfp4GroupedArgs a = ok;
  a.groups = 0;
  expect_bad(a, nullptr, "no groups");
  a = ok;
  a.problems = nullptr;
  expect_bad(a, nullptr, "null problems");
  a = ok;
  a.workspace_bytes = ok.workspace_bytes - 1;
  expect_bad(a, nullptr, "workspace too small");
  a = ok;
  a.nvfp4_activations = true;
  a.max_activation_elements = 1 << 20;
  expect_bad(a, nullptr, "workspace too small for the staging");
  // A capacity whose byte count would wrap the workspace size (it once came out at 512 bytes).
  a.max_activation_elements = INT64_MAX;
  a.workspace_bytes = size_t(1) << 62;
  expect_bad(a, nullptr, "a staging capacity past 2^40 elements");
  a = ok;
  a.workspace = static_cast<char*>(ok.workspace) + 16;
  expect_bad(a, nullptr, "misaligned workspace");
  Nvfp4GemmConfig cfg;
  ASSERT_TRUE(parse_nvfp4_config("tokens=64,splits=2", &cfg).ok());
  expect_bad(ok, &cfg, "split K");
  ASSERT_TRUE(parse_nvfp4_config("tokens=256", &cfg).ok());
  expect_bad(ok, &cfg, "256 tokens are dense only");
  auto h = g.descriptors();
  h[0].k = 48;
  EXPECT_FALSE(nvfp4_grouped_validate(h.data(), 1, false).ok());
  h = g.descriptors();
  h[0].n = 40;
  EXPECT_FALSE(nvfp4_grouped_validate(h.data(), 1, false).ok());
  h[0].n = 1 << 30;
  EXPECT_FALSE(nvfp4_grouped_validate(h.data(), 1, false).ok()) << "n at 2^30";
  h = g.descriptors();
  h[0].k = (1 << 30) + 32;
  EXPECT_FALSE(nvfp4_grouped_validate(h.data(), 1, false).ok()) << "k above 2^30";
  h = g.descriptors();
  h[0].a_scales = nullptr;
  EXPECT_TRUE(nvfp4_grouped_validate(h.data(), 1, false).ok()) << "BF16 activations need no scales";
  EXPECT_FALSE(nvfp4_grouped_validate(h.data(), 1, true).ok()) << "NVFP4 activations need scales";
  h = g.descriptors();
  h[0].d = static_cast<char*>(h[0].d) + 8;
  EXPECT_FALSE(nvfp4_grouped_validate(h.data(), 1, false).ok());
  h = g.descriptors();
  h[0].m = -1;
  EXPECT_FALSE(nvfp4_grouped_validate(h.data(), 1, false).ok());
  // The host descriptors where the device copy belongs: refused (the preparation kernel's read
  // of them was an illegal address, ending the context), unless the device reads pageable memory.
  int dev = 0, pageable = 0;
  CUDA_OK(cudaGetDevice(&dev));
  CUDA_OK(cudaDeviceGetAttribute(&pageable, cudaDevAttrPageableMemoryAccess, dev));
  if (!pageable) {
    h = g.descriptors();
    a = ok;
    a.problems = h.data();
    const Status st = nvfp4_grouped_gemm(a, nullptr);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
    EXPECT_NE(st.message().find("problem array"), std::string::npos) << st.message();
  }
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaGetLastError());
}

}  // namespace
