// Fused FP8 MoE (lowbit/moe.h) on the GPU: each stage against its CPU oracle (routing, layout,
// quantization, sorted gather), end to end against the FP64 reference on the same quantized
// operands, edge shapes, both reduce modes, bad routing, graph replay. Skips (with the reason)
// when there is no Hopper GPU. Label: gpu.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "bench_util.h"
#include "gpu_test_util.h"
#include "formats/bf16.h"
#include "formats/e4m3.h"
#include "formats/quantize.h"
#include "gemm/core/tail_plan.h"
#include "lowbit/device.h"
#include "lowbit/moe.h"
#include "reference/reference_gemm.h"
#include "reference/reference_moe.h"
#include "test_seed.h"

using namespace lowbit;

namespace {

class MoeGpu : public lowbit_test::HopperTest {};

enum class Fill { kRandom, kExact };

// One MoE problem: host inputs, their device copies, a workspace and an output.
struct MoeData {
  MoeShape s;
  OutType logits_type = OutType::kFP32, y_type = OutType::kFP32;
  MoeReduce reduce = MoeReduce::kAtomic;
  float softcap = 0.0f;
  bool renormalize = true;
  std::vector<float> logits;           // the values the GPU sees (BF16-rounded for BF16 logits)
  std::vector<uint16_t> x_bf16;
  std::vector<float> x;                // decoded BF16
  std::vector<uint8_t> w;              // E4M3 [E, n, k]
  std::vector<float> w_scales;         // [E, nb, kb]
  std::vector<int32_t> ids;            // caller routing (empty: route on the GPU)
  std::vector<float> weights;
  bench::DeviceBuffer d_logits, d_x, d_w, d_ws_scales, d_ids, d_weights, d_y, d_work;
  size_t work_bytes = 0;

  int kb() const { return s.k / 128; }
  int nb() const { return (s.n + 127) / 128; }
  size_t y_bytes() const { return static_cast<size_t>(s.m) * s.n * (y_type == OutType::kFP32 ? 4 : 2); }

  FusedMoeArgs args() const {
    FusedMoeArgs a;
    a.shape = s;
    a.logits = d_logits.p;
    a.logits_type = logits_type;
    a.softcap = softcap;
    a.renormalize = renormalize;
    if (!ids.empty()) {
      a.topk_ids = static_cast<const int32_t*>(d_ids.p);
      a.topk_weights = static_cast<const float*>(d_weights.p);
    }
    a.x = d_x.p;
    a.w = d_w.p;
    a.w_scales = static_cast<const float*>(d_ws_scales.p);
    a.y = d_y.p;
    a.y_type = y_type;
    a.reduce = reduce;
    return a;
  }
};

// Random E4M3 bytes (NaN codes replaced): values over the whole E4M3 range.
uint8_t random_e4m3(std::mt19937_64& g) {
  uint8_t c = static_cast<uint8_t>(g());
  return (c & 0x7F) == 0x7F ? 0 : c;
}

// kRandom: normal logits, uniform X, random E4M3 weights with scales in [2^-12, 2^-6].
// kExact: every product and sum exact in FP32 -- X small integers times a power of two per
// 128-block, with one +-448 times it (scale exactly that power of two, codes exact), W integers
// in [-2, 2], power-of-two W scales.
void make_inputs(MoeData& d, Fill fill, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::uniform_real_distribution<float> uni(-3.0f, 3.0f);
  const MoeShape& s = d.s;
  d.logits.resize(static_cast<size_t>(s.m) * s.experts);
  for (auto& v : d.logits) {
    v = normal(g);
    if (d.logits_type == OutType::kBF16) v = formats::bf16_to_float(formats::float_to_bf16(v));
  }
  d.x.resize(static_cast<size_t>(s.m) * s.k);
  d.x_bf16.resize(d.x.size());
  // kExact: each 128-block of a row is small integers times 2^e, e in [-2, 2], with one +-448 * 2^e,
  // so its quantization scale is exactly 2^e: a scale read for the wrong token, K block or split
  // shows (with every scale 1 it could not).
  float block_scale = 1.0f;
  for (size_t i = 0; i < d.x.size(); ++i) {
    if (fill == Fill::kExact && i % 128 == 0) block_scale = std::ldexp(1.0f, static_cast<int>(g() % 5) - 2);
    float v = fill == Fill::kExact ? static_cast<float>(static_cast<int>(g() % 17) - 8) * block_scale : uni(g);
    if (fill == Fill::kExact && i % 128 == 0) v = ((g() & 1) ? 448.0f : -448.0f) * block_scale;
    d.x_bf16[i] = formats::float_to_bf16(v);
    d.x[i] = formats::bf16_to_float(d.x_bf16[i]);
  }
  d.w.resize(static_cast<size_t>(s.experts) * s.n * s.k);
  for (auto& c : d.w) c = fill == Fill::kExact ? formats::float_to_e4m3(static_cast<float>(static_cast<int>(g() % 5) - 2))
                                               : random_e4m3(g);
  d.w_scales.resize(static_cast<size_t>(s.experts) * d.nb() * d.kb());
  for (auto& v : d.w_scales)
    v = fill == Fill::kExact ? std::ldexp(1.0f, static_cast<int>(g() % 5) - 2)
                             : std::ldexp(1.0f + static_cast<float>(g() % 1024) / 1024.0f, -12 + static_cast<int>(g() % 6));
}

// Caller routing: top_k distinct experts per token drawn at random (or `fixed` for slot 0),
// weights powers of two (exact in every sum).
void make_routing(MoeData& d, uint64_t seed, int fixed = -1) {
  std::mt19937_64 g(seed);
  const MoeShape& s = d.s;
  d.ids.resize(static_cast<size_t>(s.m) * s.top_k);
  d.weights.resize(d.ids.size());
  std::vector<int> perm(s.experts);
  for (int t = 0; t < s.m; ++t) {
    for (int e = 0; e < s.experts; ++e) perm[e] = e;
    std::shuffle(perm.begin(), perm.end(), g);
    if (fixed >= 0) std::swap(perm[0], *std::find(perm.begin(), perm.end(), fixed));
    for (int j = 0; j < s.top_k; ++j) {
      d.ids[static_cast<size_t>(t) * s.top_k + j] = perm[j];
      d.weights[static_cast<size_t>(t) * s.top_k + j] = std::ldexp(1.0f, -static_cast<int>(g() % 4));
    }
  }
}

template <class V>
void upload(bench::DeviceBuffer& b, const V& v) {
  ASSERT_TRUE(b.alloc(v.size() * sizeof(v[0])).ok());
  if (!v.empty()) {
    CUDA_OK(cudaMemcpy(b.p, v.data(), v.size() * sizeof(v[0]), cudaMemcpyHostToDevice));
  }
}

void upload_all(MoeData& d) {
  if (d.logits_type == OutType::kFP32) {
    upload(d.d_logits, d.logits);
  } else {
    std::vector<uint16_t> h(d.logits.size());
    for (size_t i = 0; i < h.size(); ++i) h[i] = formats::float_to_bf16(d.logits[i]);
    upload(d.d_logits, h);
  }
  upload(d.d_x, d.x_bf16);
  upload(d.d_w, d.w);
  upload(d.d_ws_scales, d.w_scales);
  if (!d.ids.empty()) {
    upload(d.d_ids, d.ids);
    upload(d.d_weights, d.weights);
  }
  ASSERT_TRUE(d.d_y.alloc(d.y_bytes()).ok());
  d.work_bytes = fused_moe_workspace_size(d.s, d.reduce, d.y_type);
  ASSERT_GT(d.work_bytes, 0u);
  ASSERT_TRUE(d.d_work.alloc(d.work_bytes).ok());
  // Poison: stale workspace and output must not leak into results.
  CUDA_OK(cudaMemset(d.d_work.p, 0xFF, d.work_bytes));
}

void poison_y(MoeData& d) { ASSERT_EQ(cudaMemset(d.d_y.p, 0x7F, d.y_bytes()), cudaSuccess); }

std::vector<double> read_y(const MoeData& d) {
  std::vector<uint8_t> raw(d.y_bytes());
  EXPECT_EQ(cudaMemcpy(raw.data(), d.d_y.p, raw.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  std::vector<double> y(static_cast<size_t>(d.s.m) * d.s.n);
  for (size_t i = 0; i < y.size(); ++i) y[i] = bench::read_output(raw, d.y_type, i);
  return y;
}

template <class T>
std::vector<T> read_dev(const void* p, size_t count) {
  std::vector<T> h(count);
  if (count) {
    EXPECT_EQ(cudaMemcpy(h.data(), p, count * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  }
  return h;
}

// The routing the GEMM used: the caller's, or the GPU route stage's. The GPU's is checked
// against the CPU router here, so a reference built on it cannot inherit a routing bug (a
// dropped softcap, stale ids after a graph replay): ids exact except where two logits lie
// closer than FP32 resolves (the tokens may then swap picks), weights to 1e-6.
void used_routing(const MoeData& d, std::vector<int32_t>* ids, std::vector<float>* weights) {
  if (!d.ids.empty()) {
    *ids = d.ids;
    *weights = d.weights;
    return;
  }
  MoeWorkspaceView v;
  ASSERT_TRUE(moe_workspace_view(d.s, d.reduce, d.y_type, d.d_work.p, d.work_bytes, &v).ok());
  *ids = read_dev<int32_t>(v.topk_ids, static_cast<size_t>(d.s.m) * d.s.top_k);
  *weights = read_dev<float>(v.topk_weights, static_cast<size_t>(d.s.m) * d.s.top_k);
  const reference::Routing r = reference::route(d.logits, d.s.m, d.s.experts, d.s.top_k, d.softcap, d.renormalize);
  const int64_t i = reference::first_routing_mismatch(r, ids->data(), weights->data(), d.s.m, d.s.top_k, 1e-6);
  ASSERT_LT(i, 0) << "token " << i / d.s.top_k << " slot " << i % d.s.top_k << ": the GPU routed expert "
                  << (*ids)[i] << " weight " << (*weights)[i] << ", the CPU " << r.ids[i] << " " << r.weights[i];
}

std::vector<double> reference_y(const MoeData& d) {
  std::vector<int32_t> ids;
  std::vector<float> weights;
  used_routing(d, &ids, &weights);
  const formats::QuantizedRows q = formats::quantize_e4m3_rows_1x128(d.x, d.s.m, d.s.k);
  std::vector<float> xq(q.codes.size()), w(d.w.size());
  for (size_t i = 0; i < xq.size(); ++i) xq[i] = formats::e4m3_to_float(q.codes[i]);
  float lut[256];
  for (int c = 0; c < 256; ++c) lut[c] = formats::e4m3_to_float(static_cast<uint8_t>(c));
  for (size_t i = 0; i < w.size(); ++i) w[i] = lut[d.w[i]];
  reference::MoeProblem p;
  p.m = d.s.m;
  p.n = d.s.n;
  p.k = d.s.k;
  p.experts = d.s.experts;
  p.top_k = d.s.top_k;
  p.xq = xq.data();
  p.x_scales = q.scales.data();
  p.w = w.data();
  p.w_scales = d.w_scales.data();
  p.ids = ids.data();
  p.weights = weights.data();
  return reference::moe_full(p);
}

void run_fused(MoeData& d, const MoeConfig* cfg = nullptr) {
  const Status st = fused_moe_fp8(d.args(), d.d_work.p, d.work_bytes, nullptr, cfg);
  ASSERT_TRUE(st.ok()) << st.to_string();
  CUDA_OK(cudaDeviceSynchronize());
}

// Every element: exact equality (FP32 out) or the BF16 rounding of the exact value.
void expect_exact(const MoeData& d, const std::vector<double>& ref, const std::vector<double>& got,
                  const std::string& what) {
  int64_t bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double want = d.y_type == OutType::kFP32 ? static_cast<double>(static_cast<float>(ref[i]))
                                                   : formats::bf16_to_float(formats::float_to_bf16(static_cast<float>(ref[i])));
    if (!(got[i] == want)) {
      if (bad < 5)
        ADD_FAILURE() << what << ": y[" << i / d.s.n << "][" << i % d.s.n << "] = " << got[i] << ", want " << want;
      ++bad;
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << ref.size() << " outputs differ";
}

// Random inputs: DeepGEMM's similarity measure (the bar, 1e-3) and a norm-wise bound
// from the output rounding (BF16: 2^-9 relative per element; FP32 output keeps the FP8 GEMM's
// ~1e-4 of the block-scaled tests).
void expect_close(const MoeData& d, const std::vector<double>& ref, const std::vector<double>& got,
                  const std::string& what) {
  const reference::ErrorStats e = reference::compare(ref, got);
  const double sim = reference::similarity_diff(ref, got);
  EXPECT_EQ(e.nonfinite, 0) << what;
  EXPECT_LE(sim, 1e-3) << what;
  EXPECT_LE(e.rel_fro, d.y_type == OutType::kFP32 ? 4e-4 : 4e-3) << what << " (worst element " << e.worst_index << ")";
  std::printf("[moe] %s: rel_fro %.3g, max_rel %.3g, similarity diff %.3g\n", what.c_str(), e.rel_fro, e.max_rel, sim);
}

MoeData make_case(MoeShape s, OutType y, MoeReduce reduce, Fill fill, uint64_t seed, bool caller_routing,
                  float softcap = 30.0f) {
  MoeData d;
  d.s = s;
  d.y_type = y;
  d.reduce = reduce;
  d.softcap = softcap;
  make_inputs(d, fill, seed);
  if (caller_routing) make_routing(d, seed + 7);
  return d;
}

}  // namespace

TEST_F(MoeGpu, RoutingMatchesCpu) {
  const uint64_t seed = lowbit_test::seed();
  for (OutType lt : {OutType::kFP32, OutType::kBF16})
    for (bool renorm : {true, false})
      for (float cap : {30.0f, 0.0f}) {
        MoeData d;
        d.s = MoeShape{203, 256, 256, 256, 8};
        d.logits_type = lt;
        d.softcap = cap;
        d.renormalize = renorm;
        make_inputs(d, Fill::kRandom, seed + 11);
        upload_all(d);
        const Status st = moe_run_stage(MoeStage::kRoute, d.args(), d.d_work.p, d.work_bytes, nullptr);
        ASSERT_TRUE(st.ok()) << st.to_string();
        CUDA_OK(cudaDeviceSynchronize());
        std::vector<int32_t> ids;
        std::vector<float> w;
        used_routing(d, &ids, &w);
        const reference::Routing r = reference::route(d.logits, d.s.m, d.s.experts, d.s.top_k, cap, renorm);
        int near_ties = 0;
        for (int t = 0; t < d.s.m; ++t) {
          bool same = true;
          for (int j = 0; j < d.s.top_k; ++j) same &= ids[t * 8 + j] == r.ids[t * 8 + j];
          if (!same) {
            // Only two logits closer than FP32 rounding of the softcap may swap order.
            ASSERT_LT(r.margin[t], 1e-5) << "token " << t << " routed differently";
            ++near_ties;
            continue;
          }
          for (int j = 0; j < d.s.top_k; ++j) ASSERT_NEAR(w[t * 8 + j], r.weights[t * 8 + j], 1e-6) << "token " << t;
        }
        EXPECT_LE(near_ties, 1);
      }
}

TEST_F(MoeGpu, RoutingTiesGoToTheLowerId) {
  MoeData d;
  d.s = MoeShape{64, 128, 128, 64, 6};
  d.softcap = 0.0f;
  make_inputs(d, Fill::kRandom, lowbit_test::seed());
  std::mt19937_64 g(lowbit_test::seed() + 3);
  // Many exact ties, -0 against +0 (their order codes once differed, so the tie went by the sign
  // bit), and NaN logits, which rank as -inf: token 0 has only 3 finite logits, so its last 3
  // picks are NaN experts, lowest ids first, with weight 0.
  for (auto& v : d.logits) {
    const int c = static_cast<int>(g() % 6);
    v = c == 3 ? -0.0f : c == 4 ? NAN : static_cast<float>(c % 3);
  }
  for (int e = 0; e < d.s.experts; ++e) d.logits[e] = e % 20 == 7 ? static_cast<float>(e) : NAN;
  // Token 1's top 6 come from 8 zeros, -0 at even ids and +0 at odd ones: ids 0..5 in order.
  for (int e = 0; e < d.s.experts; ++e) d.logits[d.s.experts + e] = e >= 8 ? -1.0f : e % 2 ? 0.0f : -0.0f;
  upload_all(d);
  ASSERT_TRUE(moe_run_stage(MoeStage::kRoute, d.args(), d.d_work.p, d.work_bytes, nullptr).ok());
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<int32_t> ids;
  std::vector<float> w;
  used_routing(d, &ids, &w);
  const reference::Routing r = reference::route(d.logits, d.s.m, d.s.experts, d.s.top_k, 0.0, true);
  for (size_t i = 0; i < ids.size(); ++i) {
    ASSERT_EQ(ids[i], r.ids[i]) << "pair " << i;
    ASSERT_NEAR(w[i], r.weights[i], 1e-6) << "pair " << i;
  }
}

// Infinite logits, softcap 0, on the split and the tiny path: a +inf logit takes all the weight
// (shared among the +inf ones) and a row with no finite logit weighs every expert alike. The
// softmax's inf - inf once made every weight of such a row NaN, and so its whole Y row.
TEST_F(MoeGpu, RoutingInfiniteLogits) {
  const uint64_t seed = lowbit_test::seed();
  const int E = 40;
  for (bool renorm : {true, false}) {
    MoeData d = make_case(MoeShape{4, 256, 256, E, 3}, OutType::kFP32, MoeReduce::kAtomic, Fill::kExact,
                          seed + (renorm ? 1 : 2), false, /*softcap=*/0.0f);
    d.renormalize = renorm;
    d.logits[0 * E + 17] = INFINITY;
    d.logits[1 * E + 5] = d.logits[1 * E + 30] = INFINITY;
    for (int e = 0; e < E; ++e) d.logits[2 * E + e] = -INFINITY;
    for (int e = 0; e < E; ++e) d.logits[3 * E + e] = e % 3 ? NAN : -INFINITY;
    upload_all(d);
    const reference::Routing r = reference::route(d.logits, d.s.m, E, d.s.top_k, 0.0, renorm);
    for (int tiny : {0, 1}) {
      MoeConfig c;
      c.tiny = tiny;
      c.token_tile = 16;
      poison_y(d);
      run_fused(d, &c);
      const std::string what = std::string(tiny ? "tiny" : "split") + (renorm ? " renormalized" : "");
      std::vector<int32_t> ids;
      std::vector<float> w;
      used_routing(d, &ids, &w);
      for (size_t i = 0; i < ids.size(); ++i) {
        ASSERT_EQ(ids[i], r.ids[i]) << what << " pair " << i;
        ASSERT_TRUE(std::isfinite(w[i])) << what << " pair " << i;
        ASSERT_NEAR(w[i], r.weights[i], 1e-6) << what << " pair " << i;
      }
      EXPECT_EQ(r.weights[0], 1.0) << "token 0: the +inf expert takes all the weight";
      expect_close(d, reference_y(d), read_y(d), what);
    }
  }
}

// An empty batch (an expert-parallel rank with no tokens this step) launches nothing and
// reports Ok: with the tiny path forced, every stage alone, and a workspace of stale bytes whose
// status word no stage wrote.
TEST_F(MoeGpu, EmptyBatch) {
  const MoeShape s{0, 256, 256, 8, 2};
  for (MoeReduce reduce : {MoeReduce::kAtomic, MoeReduce::kDeterministic}) {
    const size_t wsb = fused_moe_workspace_size(s, reduce, OutType::kFP32);
    bench::DeviceBuffer ws;
    ASSERT_TRUE(ws.alloc(wsb).ok());
    CUDA_OK(cudaMemset(ws.p, 0xFF, wsb ? wsb : 16));
    FusedMoeArgs a;
    a.shape = s;
    a.reduce = reduce;
    for (int tiny : {-1, 0, 1}) {
      MoeConfig c;
      c.tiny = tiny;
      if (tiny == 1) c.token_tile = 16;
      Status st = fused_moe_fp8(a, ws.p, wsb, nullptr, &c);
      EXPECT_TRUE(st.ok()) << "tiny=" << tiny << ": " << st.to_string();
      for (MoeStage stage : {MoeStage::kRoute, MoeStage::kLayout, MoeStage::kQuantizeGather, MoeStage::kExpertGemm,
                             MoeStage::kFinish}) {
        st = moe_run_stage(stage, a, ws.p, wsb, nullptr, &c);
        EXPECT_TRUE(st.ok()) << "stage " << static_cast<int>(stage) << ": " << st.to_string();
      }
      CUDA_OK(cudaDeviceSynchronize());
      st = moe_check_status(s, reduce, OutType::kFP32, ws.p, wsb, nullptr);
      EXPECT_TRUE(st.ok()) << st.to_string();
    }
  }
}

// Layout and quantize+gather: counts, offsets and the tile schedule exact; every expert segment
// holds exactly its (token, slot) pairs; every sorted row's bytes and scales equal the host
// quantizer's for its token (swap-AB), or, where the chooser takes the token-rows GEMM (which
// gathers the sorted rows itself), every token's own row and scales do, [m, k] and [k / 128, m].
// Runs the stages up to the GEMM and checks what they left in the workspace.
void check_layout_and_gather(MoeData& d) {
  upload_all(d);
  const FusedMoeArgs a = d.args();
  for (MoeStage st : {MoeStage::kRoute, MoeStage::kLayout, MoeStage::kQuantizeGather}) {
    const Status status = moe_run_stage(st, a, d.d_work.p, d.work_bytes, nullptr);
    ASSERT_TRUE(status.ok()) << status.to_string();
  }
  CUDA_OK(cudaDeviceSynchronize());
  ASSERT_TRUE(moe_check_status(d.s, d.reduce, d.y_type, d.d_work.p, d.work_bytes, nullptr).ok());
  MoeWorkspaceView v;
  ASSERT_TRUE(moe_workspace_view(d.s, d.reduce, d.y_type, d.d_work.p, d.work_bytes, &v).ok());
  std::vector<int32_t> ids;
  std::vector<float> w;
  used_routing(d, &ids, &w);
  const int E = d.s.experts, K = d.s.k, KB = d.kb();
  DeviceInfo dev;
  ASSERT_TRUE(require_hopper(&dev).ok());
  const MoeConfig cfg = moe_choose_config(d.s, d.reduce, dev.sm_count, nullptr);
  std::vector<int> count(E, 0);
  for (int e : ids) ++count[e];
  const auto counts = read_dev<int32_t>(v.counts, E);
  const auto offsets = read_dev<int32_t>(v.offsets, E + 1);
  const auto tile_start = read_dev<int32_t>(v.tile_start, E + 1);
  int off = 0, tiles = 0;
  for (int e = 0; e < E; ++e) {
    ASSERT_EQ(counts[e], count[e]) << "expert " << e;
    ASSERT_EQ(offsets[e], off) << "expert " << e;
    ASSERT_EQ(tile_start[e], tiles) << "expert " << e;
    off += (count[e] + 3) / 4 * 4;
    // Each token tile has a unit per column tile: 128 wide (swap-AB) or block_n (the token-rows GEMM).
    const int col_tiles = cfg.token_rows == 1 ? (d.s.n + cfg.block_n - 1) / cfg.block_n : d.nb();
    tiles += (count[e] + cfg.token_tile - 1) / cfg.token_tile * col_tiles * cfg.splits;
  }
  ASSERT_EQ(offsets[E], off);
  ASSERT_EQ(tile_start[E], tiles);
  const auto row_pair = read_dev<int32_t>(v.row_pair, v.rows);
  const auto row_weight = read_dev<float>(v.row_weight, v.rows);
  const auto xq = read_dev<uint8_t>(v.xq, static_cast<size_t>(v.rows) * K);
  const auto xs = read_dev<float>(v.x_scales, static_cast<size_t>(v.rows) * KB);
  const formats::QuantizedRows q = formats::quantize_e4m3_rows_1x128(d.x, d.s.m, K);
  const bool token_major = cfg.token_rows == 1;
  if (token_major) {
    for (int t = 0; t < d.s.m; ++t) {
      ASSERT_EQ(std::memcmp(&xq[static_cast<size_t>(t) * K], &q.codes[static_cast<size_t>(t) * K], K), 0)
          << "quantized row of token " << t;
      for (int b = 0; b < KB; ++b)
        ASSERT_EQ(xs[static_cast<size_t>(b) * d.s.m + t], q.scales[static_cast<size_t>(t) * KB + b]) << "token " << t;
    }
  }
  std::set<int> seen;
  for (int e = 0; e < E; ++e) {
    for (int r = offsets[e]; r < offsets[e] + counts[e]; ++r) {
      const int pair = row_pair[r];
      ASSERT_GE(pair, 0);
      ASSERT_LT(pair, d.s.m * d.s.top_k);
      ASSERT_EQ(ids[pair], e) << "row " << r << " in expert " << e << "'s segment holds pair " << pair;
      ASSERT_TRUE(seen.insert(pair).second) << "pair " << pair << " gathered twice";
      ASSERT_EQ(row_weight[r], w[pair]);
      if (token_major) continue;
      const int t = pair / d.s.top_k;
      ASSERT_EQ(std::memcmp(&xq[static_cast<size_t>(r) * K], &q.codes[static_cast<size_t>(t) * K], K), 0)
          << "quantized row of token " << t;
      for (int b = 0; b < KB; ++b)
        ASSERT_EQ(xs[static_cast<size_t>(b) * v.rows + r], q.scales[static_cast<size_t>(t) * KB + b]) << "token " << t;
    }
  }
  EXPECT_EQ(seen.size(), ids.size());
}

TEST_F(MoeGpu, LayoutAndGatherExact) {
  const uint64_t seed = lowbit_test::seed();
  MoeData d = make_case(MoeShape{301, 256, 512, 64, 6}, OutType::kFP32, MoeReduce::kAtomic, Fill::kRandom, seed, false);
  check_layout_and_gather(d);
}

// 301 tokens over 8 experts, top-4: about 150 per expert on average, so the chooser takes the token-rows GEMM and the
// quantize stage writes each token once, token-major.
TEST_F(MoeGpu, LayoutAndTokenMajorQuantizeExact) {
  const uint64_t seed = lowbit_test::seed();
  MoeData d = make_case(MoeShape{301, 256, 512, 8, 4}, OutType::kFP32, MoeReduce::kAtomic, Fill::kRandom, seed, false);
  DeviceInfo dev;
  ASSERT_TRUE(require_hopper(&dev).ok());
  ASSERT_EQ(moe_choose_config(d.s, d.reduce, dev.sm_count, nullptr).token_rows, 1);
  check_layout_and_gather(d);
}

// Tokens as the MMA's rows (128-token tiles) on the block-scaled core, `block_n` weight rows per
// tile (0: auto), on `grid` CTAs (0: all SMs; a few CTAs walk across experts, with the next
// expert's first MMAs in flight while a tile's rows are scattered).
static MoeConfig rows_config(int block_n = 0, int grid = 0, int weights_evict_first = -1, int tail_split = -1) {
  MoeConfig c;
  c.token_rows = 1;
  c.block_n = block_n;
  c.grid = grid;
  c.pdl = 0;
  c.weights_evict_first = weights_evict_first;
  c.tail_split = tail_split;
  return c;
}

// Exact inputs: every output equal to the FP64 reference (its BF16 rounding for BF16 output), for
// each token tile, K split and reduce mode, with edge token counts.
TEST_F(MoeGpu, ExactAcrossConfigsAndEdgeShapes) {
  const uint64_t seed = lowbit_test::seed();
  // {tile, splits, grid, prefetch, tileprefetch, pdl, tiny}: PDL off, the tiny path off (where
  // it would apply: m = 1 and 3 with tile 16).
  const std::vector<MoeConfig> cfgs = {{16, 1, 0},         {32, 2, 0},          {64, 4, 0},         {128, 1, 0},
                                       {16, 1, 5},         {32, 1, 0, -1, -1, 0, 0}, {16, 2, 0, -1, -1, 1, 0},
                                       {16, 4, 0, -1, -1, 0, 0}, {16, 3, 0}, rows_config(), rows_config(128),
                                       rows_config(256, 5, 0), rows_config(128, 3, 1), rows_config(256, 7, -1, 0)};
  for (int m : {1, 3, 127, 129}) {
    for (OutType y : {OutType::kFP32, OutType::kBF16}) {
      for (MoeReduce red : {MoeReduce::kAtomic, MoeReduce::kDeterministic}) {
        MoeData d = make_case(MoeShape{m, 272, 384, 12, 3}, y, red, Fill::kExact, seed + m, true);
        upload_all(d);
        const std::vector<double> ref = reference_y(d);
        for (const MoeConfig& c : cfgs) {
          poison_y(d);
          run_fused(d, &c);
          expect_exact(d, ref, read_y(d),
                       "m=" + std::to_string(m) + (y == OutType::kFP32 ? " fp32" : " bf16") +
                           (red == MoeReduce::kAtomic ? " atomic " : " deterministic ") + c.to_string());
        }
      }
    }
  }
}

// The token-rows GEMM's last partial wave cut along K (MoeConfig::tail_split, atomic mode): exact on
// small integers over grids whose tails take 2, 3 and 4 parts (8 K blocks; tail=1, parts of one K
// block or more; the part counts that ran are read back from the layout stage's plan, and at least
// two different cuts must have run), and deterministic mode, which never cuts, alike.
TEST_F(MoeGpu, TokenRowsTailPartsExact) {
  const uint64_t seed = lowbit_test::seed();
  std::vector<int> parts_seen;
  for (MoeReduce red : {MoeReduce::kAtomic, MoeReduce::kDeterministic}) {
    for (OutType y : {OutType::kFP32, OutType::kBF16}) {
      const MoeShape s{300, 272, 1024, 5, 2};  // ~120 tokens per expert: 1-2 tile rows each, 2 column tiles
      MoeData d = make_case(s, y, red, Fill::kExact, seed + static_cast<int>(red) * 2 + (y == OutType::kBF16), true);
      upload_all(d);
      const std::vector<double> ref = reference_y(d);
      for (int grid : {3, 5, 7, 11, 13, 40}) {
        const MoeConfig c = rows_config(256, grid, -1, red == MoeReduce::kAtomic ? 1 : -1);
        poison_y(d);
        run_fused(d, &c);
        const std::string what = std::string(red == MoeReduce::kAtomic ? "atomic " : "deterministic ") +
                                 (y == OutType::kFP32 ? "fp32 " : "bf16 ") + c.to_string();
        expect_exact(d, ref, read_y(d), what);
        MoeWorkspaceView v;
        ASSERT_TRUE(moe_workspace_view(d.s, d.reduce, d.y_type, d.d_work.p, d.work_bytes, &v).ok());
        int at[1 + gemm::kTailPlanInts] = {};  // tile_start[experts], then the plan
        CUDA_OK(cudaMemcpy(at, v.tile_start + s.experts, sizeof(at), cudaMemcpyDeviceToHost));
        const int parts = at[gemm::kTailPlanParts];
        if (red == MoeReduce::kDeterministic) {
          EXPECT_EQ(parts, 1) << what;
        } else if (parts > 1 && std::find(parts_seen.begin(), parts_seen.end(), parts) == parts_seen.end()) {
          parts_seen.push_back(parts);
        }
      }
    }
  }
  EXPECT_GE(parts_seen.size(), 2u) << "the grids cut the last wave into too few different part counts";
}

// The tiny-batch path (routing inside the GEMM) against the split path's reference: exact on
// small integers for m = 1..4, both output types, GPU and caller routing, K splits 1/2/4, and
// the published routing equal to the CPU's; out-of-range caller ids skipped and reported;
// the first kernel launched with and without PDL.
TEST_F(MoeGpu, TinyPathExact) {
  const uint64_t seed = lowbit_test::seed();
  for (int m = 1; m <= 4; ++m) {
    for (OutType y : {OutType::kFP32, OutType::kBF16}) {
      for (bool caller : {false, true}) {
        MoeData d = make_case(MoeShape{m, 272, 1024, 40, 6}, y, MoeReduce::kAtomic, Fill::kExact, seed + m, caller);
        upload_all(d);
        std::vector<double> ref;
        if (caller) ref = reference_y(d);
        for (int splits : {1, 2, 4}) {
          MoeConfig c;
          c.tiny = 1;
          c.token_tile = 16;
          c.splits = splits;
          c.pdl_first = splits == 2 ? 0 : -1;  // the first kernel also as a plain launch
          poison_y(d);
          run_fused(d, &c);
          const std::string what = "tiny m=" + std::to_string(m) + (y == OutType::kFP32 ? " fp32" : " bf16") +
                                   (caller ? " caller-routed " : " gpu-routed ") + c.to_string();
          if (ref.empty()) {
            // The routing the kernel published equals the CPU's, and the reference uses it.
            std::vector<int32_t> ids;
            std::vector<float> w;
            used_routing(d, &ids, &w);
            const reference::Routing r =
                reference::route(d.logits, d.s.m, d.s.experts, d.s.top_k, d.softcap, d.renormalize);
            for (size_t i = 0; i < ids.size(); ++i) {
              ASSERT_EQ(ids[i], r.ids[i]) << what << " pair " << i;
              ASSERT_NEAR(w[i], r.weights[i], 1e-6) << what << " pair " << i;
            }
            ref = reference_y(d);
          }
          if (caller) {
            expect_exact(d, ref, read_y(d), what);
          } else {
            // Softmax weights are not small integers: the atomics' order moves the last bits
            // (relative to the terms, which cancel), so the random-input bound applies.
            expect_close(d, ref, read_y(d), what);
          }
          ASSERT_TRUE(moe_check_status(d.s, d.reduce, d.y_type, d.d_work.p, d.work_bytes, nullptr).ok()) << what;
        }
      }
    }
  }
  // The auto config picks it for one token; forcing it where it does not apply is an error.
  DeviceInfo dev;
  ASSERT_TRUE(require_hopper(&dev).ok());
  EXPECT_EQ(moe_choose_config(MoeShape{1, 512, 2048, 256, 8}, MoeReduce::kAtomic, dev.sm_count, nullptr).tiny, 1);
  MoeData big = make_case(MoeShape{5, 256, 512, 64, 6}, OutType::kFP32, MoeReduce::kAtomic, Fill::kExact, seed, false);
  upload_all(big);
  MoeConfig forced;
  forced.tiny = 1;
  EXPECT_EQ(fused_moe_fp8(big.args(), big.d_work.p, big.work_bytes, nullptr, &forced).code(),
            StatusCode::kInvalidArgument);
  // Caller ids out of range: skipped, reported.
  MoeData bad = make_case(MoeShape{3, 128, 256, 8, 2}, OutType::kFP32, MoeReduce::kAtomic, Fill::kExact, seed, true);
  bad.ids[3] = 8;
  upload_all(bad);
  poison_y(bad);
  run_fused(bad, &forced);
  const Status st = moe_check_status(bad.s, bad.reduce, bad.y_type, bad.d_work.p, bad.work_bytes, nullptr);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("pair 3"), std::string::npos) << st.message();
  expect_exact(bad, reference_y(bad), read_y(bad), "tiny: bad ids skipped");
}

// One token at the seed's model shape on random inputs, GPU routing: the tiny path and the
// split path both within the bound of the reference.
TEST_F(MoeGpu, TinyPathSeedShape) {
  const uint64_t seed = lowbit_test::seed();
  for (OutType y : {OutType::kFP32, OutType::kBF16}) {
    MoeData d = make_case(MoeShape{1, 512, 2048, 256, 8}, y, MoeReduce::kAtomic, Fill::kRandom, seed, false);
    upload_all(d);
    std::vector<double> ref;
    for (int tiny : {1, 0}) {
      MoeConfig c;
      c.tiny = tiny;
      poison_y(d);
      run_fused(d, &c);
      if (ref.empty()) ref = reference_y(d);  // the routing the first run published
      expect_close(d, ref, read_y(d), std::string("m=1 seed shape tiny=") + std::to_string(tiny));
    }
  }
}

TEST_F(MoeGpu, AllTokensToOneExpertAndEmptyExperts) {
  const uint64_t seed = lowbit_test::seed();
  MoeData d;
  d.s = MoeShape{300, 256, 256, 32, 1};
  make_inputs(d, Fill::kExact, seed);
  make_routing(d, seed + 1, /*fixed=*/5);  // top-1: every token to expert 5, the other 31 empty
  upload_all(d);
  const std::vector<double> ref = reference_y(d);
  for (const MoeConfig& c : std::vector<MoeConfig>{{0, 0, 0}, {16, 2, 0}, {128, 1, 0}, rows_config(), rows_config(128, 2)}) {
    poison_y(d);
    run_fused(d, &c);
    expect_exact(d, ref, read_y(d), "one expert " + c.to_string());
  }
}

// The seed's shape (and the second model shape) end to end on random inputs, GPU routing.
TEST_F(MoeGpu, SeedShapesMatchReference) {
  const uint64_t seed = lowbit_test::seed();
  for (const MoeShape& s : {MoeShape{128, 512, 2048, 256, 8}, MoeShape{96, 768, 2048, 128, 8}}) {
    for (OutType y : {OutType::kFP32, OutType::kBF16}) {
      MoeData d = make_case(s, y, MoeReduce::kAtomic, Fill::kRandom, seed + s.n, false);
      upload_all(d);
      const std::string what =
          "E=" + std::to_string(s.experts) + " n=" + std::to_string(s.n) + (y == OutType::kFP32 ? " fp32" : " bf16");
      poison_y(d);
      run_fused(d);
      const std::vector<double> ref = reference_y(d);  // after the run: it uses the GPU's routing
      expect_close(d, ref, read_y(d), what);
      // And with the tokens as the MMA's rows (its per-row X scales on random data).
      const MoeConfig rows = rows_config();
      poison_y(d);
      run_fused(d, &rows);
      expect_close(d, ref, read_y(d), what + " rows=1");
    }
  }
}

// Many tokens per expert (the token-rows path the chooser picks from 64 per expert): several
// 128-token tiles per expert, ragged last tiles whose rows run into the next expert's segment,
// N not a multiple of the column tile; random inputs, both reduce modes and column tiles.
TEST_F(MoeGpu, TokenRowsOnTheCoreMatchReference) {
  const uint64_t seed = lowbit_test::seed();
  const MoeShape s{1024, 400, 1024, 24, 4};  // ~171 tokens per expert
  for (MoeReduce red : {MoeReduce::kAtomic, MoeReduce::kDeterministic}) {
    for (OutType y : {OutType::kFP32, OutType::kBF16}) {
      MoeData d = make_case(s, y, red, Fill::kRandom, seed + static_cast<int>(red) * 2 + (y == OutType::kBF16), false);
      upload_all(d);
      std::vector<double> ref;
      for (const MoeConfig& c : {rows_config(), rows_config(128), rows_config(256, 7)}) {
        poison_y(d);
        run_fused(d, &c);
        if (ref.empty()) ref = reference_y(d);  // the GPU's routing
        expect_close(d, ref, read_y(d),
                     std::string(red == MoeReduce::kAtomic ? "atomic " : "deterministic ") +
                         (y == OutType::kFP32 ? "fp32 " : "bf16 ") + c.to_string());
      }
    }
  }
}

TEST_F(MoeGpu, DeterministicModeIsBitwiseReproducible) {
  const uint64_t seed = lowbit_test::seed();
  MoeData d = make_case(MoeShape{128, 512, 2048, 256, 8}, OutType::kFP32, MoeReduce::kDeterministic, Fill::kRandom,
                        seed, false);
  upload_all(d);
  run_fused(d);
  std::vector<uint8_t> first(d.y_bytes()), again(d.y_bytes());
  CUDA_OK(cudaMemcpy(first.data(), d.d_y.p, first.size(), cudaMemcpyDeviceToHost));
  expect_close(d, reference_y(d), read_y(d), "deterministic");
  for (int run = 0; run < 10; ++run) {
    poison_y(d);
    run_fused(d);
    CUDA_OK(cudaMemcpy(again.data(), d.d_y.p, again.size(), cudaMemcpyDeviceToHost));
    ASSERT_EQ(std::memcmp(first.data(), again.data(), first.size()), 0) << "run " << run << " differs";
  }
}

// Captured once, replayed with new logits and activations written into the same buffers.
TEST_F(MoeGpu, GraphReplayWithNewInputs) {
  const uint64_t seed = lowbit_test::seed();
  MoeData d = make_case(MoeShape{64, 256, 512, 32, 4}, OutType::kBF16, MoeReduce::kAtomic, Fill::kRandom, seed, false);
  upload_all(d);
  bench::OwnedStream stream;
  ASSERT_TRUE(stream.create().ok());
  cudaGraph_t graph;
  CUDA_OK(cudaStreamBeginCapture(stream.s, cudaStreamCaptureModeThreadLocal));
  const Status st = fused_moe_fp8(d.args(), d.d_work.p, d.work_bytes, stream.s);
  CUDA_OK(cudaStreamEndCapture(stream.s, &graph));
  ASSERT_TRUE(st.ok()) << st.to_string();
  cudaGraphExec_t exec;
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  for (int round = 0; round < 3; ++round) {
    make_inputs(d, Fill::kRandom, seed + 100 + round);
    CUDA_OK(cudaMemcpy(d.d_logits.p, d.logits.data(), d.logits.size() * 4, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(d.d_x.p, d.x_bf16.data(), d.x_bf16.size() * 2, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(d.d_w.p, d.w.data(), d.w.size(), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(d.d_ws_scales.p, d.w_scales.data(), d.w_scales.size() * 4, cudaMemcpyHostToDevice));
    poison_y(d);
    CUDA_OK(cudaGraphLaunch(exec, stream.s));
    CUDA_OK(cudaStreamSynchronize(stream.s));
    expect_close(d, reference_y(d), read_y(d), "graph replay " + std::to_string(round));
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

// A caller routing with out-of-range ids: those pairs are left out (the rest is exact) and the
// status word names the first.
// Caller routing that names one expert in two slots of a token: the token gets both slots'
// weights. The tiny path has one unit per distinct expert and once took only the first slot.
TEST_F(MoeGpu, RepeatedCallerIdsAddTheirWeights) {
  const uint64_t seed = lowbit_test::seed();
  for (bool tiny : {true, false}) {
    for (MoeReduce reduce : {MoeReduce::kAtomic, MoeReduce::kDeterministic}) {
      if (tiny && reduce == MoeReduce::kDeterministic) continue;  // the tiny path is atomic only
      const int m = tiny ? 3 : 40;
      MoeData d = make_case(MoeShape{m, 128, 256, 8, 2}, OutType::kFP32, reduce, Fill::kExact, seed + m, true);
      for (int t = 0; t < m; t += 2) d.ids[t * 2 + 1] = d.ids[t * 2];
      upload_all(d);
      poison_y(d);
      MoeConfig c;
      c.tiny = 1;
      c.token_tile = 16;
      run_fused(d, tiny ? &c : nullptr);
      const std::string what = std::string(tiny ? "tiny" : "split") +
                               (reduce == MoeReduce::kAtomic ? " atomic" : " deterministic") + ", repeated ids";
      ASSERT_TRUE(moe_check_status(d.s, d.reduce, d.y_type, d.d_work.p, d.work_bytes, nullptr).ok()) << what;
      expect_exact(d, reference_y(d), read_y(d), what);
    }
  }
}

TEST_F(MoeGpu, BadExpertIdsAreReportedAndSkipped) {
  const uint64_t seed = lowbit_test::seed();
  MoeData d = make_case(MoeShape{40, 128, 256, 8, 2}, OutType::kFP32, MoeReduce::kAtomic, Fill::kExact, seed, true);
  d.ids[7] = 8;    // == experts
  d.ids[30] = -1;
  upload_all(d);
  poison_y(d);
  run_fused(d);
  const Status st = moe_check_status(d.s, d.reduce, d.y_type, d.d_work.p, d.work_bytes, nullptr);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("pair 7"), std::string::npos) << st.message();
  expect_exact(d, reference_y(d), read_y(d), "bad ids skipped");
  // Deterministic mode leaves them out too.
  MoeData e = make_case(MoeShape{40, 128, 256, 8, 2}, OutType::kFP32, MoeReduce::kDeterministic, Fill::kExact, seed, true);
  e.ids[3] = 1 << 20;
  upload_all(e);
  poison_y(e);
  run_fused(e);
  EXPECT_FALSE(moe_check_status(e.s, e.reduce, e.y_type, e.d_work.p, e.work_bytes, nullptr).ok());
  expect_exact(e, reference_y(e), read_y(e), "bad ids skipped, deterministic");
}
