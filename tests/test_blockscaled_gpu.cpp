// Block-scaled FP8 GEMM (dense and grouped) on the GPU against the FP64 CPU reference on the
// same E4M3 inputs and FP32 scales. Skips (with the reason) when there is no Hopper GPU.
// Label: gpu.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench_util.h"
#include "gpu_test_util.h"
#include "cublaslt_blockscaled.h"
#include "device_fill.h"
#include "formats/bf16.h"
#include "formats/e4m3.h"
#include "lowbit/blockscaled.h"
#include "lowbit/device.h"
#include "reference/reference_gemm.h"
#include "test_seed.h"

using namespace lowbit;

namespace {

class BlockScaledGpu : public lowbit_test::HopperTest {};

enum class Inputs { kSmallInts, kUniform };

// One problem's device tensors, filled on the device from a seed, and their host copies.
struct Problem {
  int m = 0, n = 0, k = 0;
  int64_t sfa_ld = 0;
  OutType out = OutType::kBF16;
  bench::DeviceBuffer a, b, d, sfa, sfb;
  std::vector<float> fa, fb, hsfa, hsfb;

  int kblocks() const { return (k + 127) / 128; }
  int nblocks() const { return (n + 127) / 128; }
  size_t out_bytes() const { return static_cast<size_t>(m) * n * (out == OutType::kFP32 ? 4 : 2); }

  void make(int m_, int n_, int k_, OutType o, Inputs in, uint64_t seed, int sfa_pad = 0) {
    m = m_;
    n = n_;
    k = k_;
    out = o;
    sfa_ld = (m + 3) / 4 * 4 + sfa_pad;
    const size_t na = static_cast<size_t>(m) * k, nb = static_cast<size_t>(n) * k;
    const size_t nsa = static_cast<size_t>(kblocks()) * sfa_ld, nsb = static_cast<size_t>(nblocks()) * kblocks();
    ASSERT_TRUE(a.alloc(na).ok());
    ASSERT_TRUE(b.alloc(nb).ok());
    ASSERT_TRUE(d.alloc(out_bytes()).ok());
    ASSERT_TRUE(sfa.alloc(nsa * 4).ok());
    ASSERT_TRUE(sfb.alloc(nsb * 4).ok());
    const bool ints = in == Inputs::kSmallInts;
    if (na) {
      CUDA_OK(ints ? bench::fill_e4m3_int(a.p, na, 4, seed, nullptr)
                   : bench::fill_e4m3_uniform(a.p, na, 448.0f, seed, nullptr));
    }
    CUDA_OK(ints ? bench::fill_e4m3_int(b.p, nb, 4, seed + 1, nullptr)
                 : bench::fill_e4m3_uniform(b.p, nb, 448.0f, seed + 1, nullptr));
    // Exact mode: powers of two in [2^-2, 2^2] keep every partial sum exact in FP32.
    if (nsa) {
      CUDA_OK(bench::fill_f32_scales(static_cast<float*>(sfa.p), nsa, ints ? -2 : -12, ints ? 2 : -6, ints, seed + 2,
                                     nullptr));
    }
    CUDA_OK(bench::fill_f32_scales(static_cast<float*>(sfb.p), nsb, ints ? -2 : -12, ints ? 2 : -6, ints, seed + 3,
                                   nullptr));
    poison();
    std::vector<uint8_t> ha(na), hb(nb);
    hsfa.resize(nsa);
    hsfb.resize(nsb);
    CUDA_OK(cudaMemcpy(ha.data(), a.p, na, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(hb.data(), b.p, nb, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(hsfa.data(), sfa.p, nsa * 4, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(hsfb.data(), sfb.p, nsb * 4, cudaMemcpyDeviceToHost));
    fa.resize(na);
    fb.resize(nb);
    for (size_t i = 0; i < na; ++i) fa[i] = formats::e4m3_to_float(ha[i]);
    for (size_t i = 0; i < nb; ++i) fb[i] = formats::e4m3_to_float(hb[i]);
  }
  void poison() {
    if (out_bytes()) {
      ASSERT_EQ(bench::fill_u16(d.p, out_bytes() / 2, 0xFFFF, nullptr), cudaSuccess);  // NaN
    }
  }
  std::vector<double> reference() const {
    reference::BlockScaledProblem p;
    p.m = m;
    p.n = n;
    p.k = k;
    p.a = fa.data();
    p.b = fb.data();
    p.sfa = hsfa.data();
    p.sfa_ld = sfa_ld;
    p.sfb = hsfb.data();
    return reference::blockscaled_full(p);
  }
  std::vector<double> read(const void* dev) const {
    std::vector<uint8_t> raw(out_bytes());
    EXPECT_EQ(cudaMemcpy(raw.data(), dev, raw.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    std::vector<double> got(static_cast<size_t>(m) * n);
    for (size_t i = 0; i < got.size(); ++i) got[i] = bench::read_output(raw, out, i);
    return got;
  }
  Fp8GroupedProblem descriptor() const {
    return Fp8GroupedProblem{m, n, k, 0, a.p, b.p, d.p, static_cast<const float*>(sfa.p),
                             static_cast<const float*>(sfb.p), sfa_ld};
  }
  std::string name() const {
    return std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) +
           (out == OutType::kFP32 ? " fp32" : " bf16");
  }
};

double round_to_out(double v, OutType out) {
  return out == OutType::kFP32 ? static_cast<double>(static_cast<float>(v))
                               : static_cast<double>(formats::bf16_to_float(formats::float_to_bf16(static_cast<float>(v))));
}

// Exact mode: every element equals the FP64 reference rounded to the output type.
void expect_exact(const Problem& p, const std::vector<double>& got, const std::string& what) {
  const auto ref = p.reference();
  int64_t bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double want = round_to_out(ref[i], p.out);
    if (!(got[i] == want)) {
      if (bad < 5)
        ADD_FAILURE() << what << " " << p.name() << ": element (" << i / p.n << ", " << i % p.n << ") = " << got[i]
                      << ", want " << want;
      ++bad;
    }
  }
  EXPECT_EQ(bad, 0) << what << " " << p.name();
}

// Random mode: every element finite (nothing left poisoned), norm-wise error within 2x
// cuBLASLt's on the same inputs when given, and DeepGEMM's similarity measure <= 1e-3.
void expect_close(const Problem& p, const std::vector<double>& got, const std::string& what,
                  const reference::ErrorStats* cublas = nullptr) {
  const auto ref = p.reference();
  const auto e = reference::compare(ref, got);
  const double sim = reference::similarity_diff(ref, got);
  EXPECT_EQ(e.nonfinite, 0) << what << " " << p.name() << ": non-finite output (first at " << e.worst_index << ")";
  // FP32 out: the error of the tensor cores' FP8 accumulation inside each K block (cuBLASLt
  // measured 1.07e-4 on such inputs); BF16 out: one BF16 rounding on top.
  const double own_bound = p.out == OutType::kFP32 ? 5e-4 : 8e-3;
  EXPECT_LE(e.rel_fro, own_bound) << what << " " << p.name();
  EXPECT_LE(sim, 1e-3) << what << " " << p.name();
  if (cublas) {
    EXPECT_LE(e.rel_fro, 2.0 * cublas->rel_fro + 1e-7)
        << what << " " << p.name() << ": ours " << e.rel_fro << " vs cuBLASLt " << cublas->rel_fro;
  }
  std::printf("[lowbit] %s %s: rel_fro %.3g max_rel %.3g sim %.3g%s\n", what.c_str(), p.name().c_str(), e.rel_fro,
              e.max_rel, sim, cublas ? (" (cuBLASLt rel_fro " + std::to_string(cublas->rel_fro) + ")").c_str() : "");
}

Fp8BlockScaledArgs dense_args(const Problem& p) {
  Fp8BlockScaledArgs x;
  x.m = p.m;
  x.n = p.n;
  x.k = p.k;
  x.a = p.a.p;
  x.b = p.b.p;
  x.d = p.d.p;
  x.sfa = static_cast<const float*>(p.sfa.p);
  x.sfa_ld = p.sfa_ld;
  x.sfb = static_cast<const float*>(p.sfb.p);
  x.out_type = p.out;
  return x;
}

// Runs the dense GEMM with `cfg` (null: the chooser) and a zero-filled split-K workspace of the
// size the call asks for.
Status run_dense(const Problem& p, const BlockScaledConfig* cfg) {
  Fp8BlockScaledArgs x = dense_args(p);
  const size_t wsb = fp8_blockscaled_workspace_size(p.m, p.n, p.k, cfg);
  bench::DeviceBuffer ws;
  LOWBIT_RETURN_IF_ERROR(ws.alloc(wsb));
  LOWBIT_RETURN_IF_ERROR(workspace_init(ws.p, wsb, nullptr));
  x.workspace = ws.p;
  x.workspace_bytes = wsb;
  const Status st = fp8_blockscaled_gemm(x, nullptr, cfg);
  if (cudaDeviceSynchronize() != cudaSuccess) return Status::Error(StatusCode::kCudaError, "sync");
  return st;
}

// Every dense tile of the GEMM core (128 x 64 / 128 / 144 / 192 / 256, 64 x 32 / 48 / 64 / 80), split
// K ways or not (every split promotes its own K blocks with their scales; the fix-up adds FP32
// partial tiles), and the chooser. N = 144, 272, 400 leave the last 256-wide tile's second scale block
// partly or wholly past N; 64-wide tiles take the scales of the 128 block they lie in. The 144- and
// 192-wide tiles straddle two scale blocks: N = 800 puts their split column at every offset a
// 192-wide tile has (128, 64) and at six of a 144-wide tile's, with a partial last tile; the 64-row
// tiles 48 and 80 wide straddle too, and N = 800 puts their split column at every offset they have
// (multiples of 16). The wide tiles with and without the overlapped epilogue (BF16 out only), and on
// 2-3 CTAs, so each walks several units and stores one while the next one's first MMAs run.
std::vector<BlockScaledConfig> dense_configs() {
  std::vector<BlockScaledConfig> out;
  for (const char* text : {"bn=128", "bn=256", "bn=64", "bm=64,bn=64", "bn=128,splits=3", "bm=64,bn=64,splits=2",
                           "bn=256,splits=2,grid=5,group=2", "bn=256,overlap=0", "bn=256,overlap=1,splits=1,grid=3,group=2",
                           "bn=128,overlap=1,splits=1,grid=2", "bn=192", "bn=144", "bn=192,overlap=0,splits=3",
                           "bn=144,splits=2,grid=3", "bn=192,overlap=1,splits=1,grid=3,group=1", "bn=144,overlap=1,splits=1,grid=2",
                           "bm=64,bn=32", "bm=64,bn=32,splits=2,grid=5", "bm=64,bn=48", "bm=64,bn=80",
                           "bm=64,bn=48,splits=2,grid=5", "bm=64,bn=80,splits=3,grid=4,group=1",
                           // Split within a cluster (BF16 out; FP32 runs them through the workspace): 2-3
                           // splits, and grids of fewer clusters than tiles, so each cluster walks several
                           // tiles and the landing slots are handed back and refilled.
                           "bm=64,bn=64,splits=2,creduce=0", "bm=64,bn=64,splits=3", "bm=64,bn=64,splits=3,grid=6",
                           "bn=64,splits=2", "bn=64,splits=2,grid=4,group=1"}) {
    BlockScaledConfig c;
    EXPECT_TRUE(parse_blockscaled_config(text, &c).ok()) << text;
    out.push_back(c);
  }
  return out;
}

// Every grouped kernel: 128 x 128 and 128 x 256 (with the overlapped epilogue for BF16 out), on
// every CTA that fits, and on 3 and 2 CTAs, so that each CTA walks many units across group
// boundaries and stores one group's tile while the next group's first MMAs run.
std::vector<BlockScaledConfig> tile_configs() {
  std::vector<BlockScaledConfig> out;
  for (const char* text : {"bn=128", "bn=256", "bn=256,grid=3", "bn=128,grid=2,group=1"}) {
    BlockScaledConfig c;
    EXPECT_TRUE(parse_blockscaled_config(text, &c).ok()) << text;
    out.push_back(c);
  }
  return out;
}

// Whether a grouped kernel runs this tile for this output: FP32 out has the 128-wide tile only
// (variants.def).
bool grouped_compiled(const BlockScaledConfig& c, OutType out) { return out == OutType::kBF16 || c.block_n != 256; }

uint64_t seed_for(int salt) { return lowbit_test::seed() * 6271 + static_cast<uint64_t>(salt) * 101; }

TEST_F(BlockScaledGpu, DenseSmallIntegersExact) {
  struct S { int m, n, k; OutType out; int pad; };
  const S shapes[] = {{128, 128, 128, OutType::kFP32, 0}, {1, 128, 256, OutType::kBF16, 0},
                      {3, 256, 384, OutType::kFP32, 4},   {127, 144, 1040, OutType::kBF16, 0},
                      {129, 272, 2048, OutType::kFP32, 8}, {300, 16, 16, OutType::kBF16, 0},
                      {257, 400, 512, OutType::kBF16, 0}, {200, 800, 640, OutType::kBF16, 0},
                      {65, 800, 384, OutType::kFP32, 0}, {45, 336, 1152, OutType::kBF16, 0}};
  int salt = 0;
  std::vector<BlockScaledConfig> configs = dense_configs();
  configs.push_back(BlockScaledConfig{});  // the marker for "no config": the chooser
  for (size_t i = 0; i < configs.size(); ++i) {
    const BlockScaledConfig* cfg = i + 1 < configs.size() ? &configs[i] : nullptr;
    for (const auto& s : shapes) {
      if (cfg && cfg->splits > (s.k + 127) / 128) continue;  // more splits than K blocks: refused
      if (cfg && cfg->overlap == 1 && s.out != OutType::kBF16) continue;  // compiled for BF16 out: refused
      Problem p;
      p.make(s.m, s.n, s.k, s.out, Inputs::kSmallInts, seed_for(++salt), s.pad);
      const Status st = run_dense(p, cfg);
      ASSERT_TRUE(st.ok()) << st.to_string();
      expect_exact(p, p.read(p.d.p), "dense " + (cfg ? cfg->to_string() : std::string("chosen")));
    }
  }
}

// The overlapped epilogue where no kernel has it is refused, not run without it.
TEST_F(BlockScaledGpu, DenseRefusesOverlapWhereNotCompiled) {
  Problem p;
  p.make(256, 512, 512, OutType::kBF16, Inputs::kSmallInts, seed_for(90));
  for (const char* text : {"bn=256,overlap=1,splits=2", "bn=64,overlap=1", "bm=64,bn=64,overlap=1"}) {
    BlockScaledConfig c;
    ASSERT_TRUE(parse_blockscaled_config(text, &c).ok()) << text;
    const Status st = run_dense(p, &c);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << text << ": " << st.to_string();
    EXPECT_NE(st.message().find("overlap=1 needs"), std::string::npos) << st.to_string();
  }
  Problem f;
  f.make(256, 512, 512, OutType::kFP32, Inputs::kSmallInts, seed_for(91));
  BlockScaledConfig c;
  ASSERT_TRUE(parse_blockscaled_config("bn=256,overlap=1", &c).ok());
  EXPECT_EQ(run_dense(f, &c).code(), StatusCode::kInvalidArgument);
}

// Split K within a cluster adds the splits' partials in the workspace fix-up's order, so both
// transports give the same bits on random inputs; within a cluster needs no workspace at all.
TEST_F(BlockScaledGpu, DenseClusterSplitMatchesWorkspaceBitwise) {
  struct S { int m, n, k; const char* tile; int splits; };
  const S cases[] = {{64, 2112, 7168, "bm=64,bn=64", 3}, {1, 320, 2048, "bm=64,bn=64", 3},
                     {129, 256, 1920, "bm=64,bn=64", 2}, {128, 4096, 7168, "bn=64", 2},
                     {3, 192, 4096, "bn=64", 2},          {200, 448, 1024, "bm=64,bn=64,grid=3", 3}};
  int salt = 300;
  for (const auto& c : cases) {
    Problem p;
    p.make(c.m, c.n, c.k, OutType::kBF16, Inputs::kUniform, seed_for(++salt));
    std::vector<double> got[2];
    for (int creduce = 0; creduce < 2; ++creduce) {
      const std::string text = std::string(c.tile) + ",splits=" + std::to_string(c.splits) +
                               ",creduce=" + std::to_string(creduce);
      BlockScaledConfig cfg;
      ASSERT_TRUE(parse_blockscaled_config(text, &cfg).ok()) << text;
      p.poison();  // every element must be written
      Fp8BlockScaledArgs x = dense_args(p);
      bench::DeviceBuffer ws;
      if (creduce == 0) {
        x.workspace_bytes = fp8_blockscaled_workspace_size(p.m, p.n, p.k, &cfg);
        ASSERT_TRUE(ws.alloc(x.workspace_bytes).ok());
        ASSERT_TRUE(workspace_init(ws.p, x.workspace_bytes, nullptr).ok());
        x.workspace = ws.p;
      }
      const Status st = fp8_blockscaled_gemm(x, nullptr, &cfg);  // creduce=1: no workspace
      ASSERT_TRUE(st.ok()) << text << ": " << st.to_string();
      CUDA_OK(cudaDeviceSynchronize());
      got[creduce] = p.read(p.d.p);
      if (creduce == 1) expect_close(p, got[1], "dense " + text);
    }
    int64_t differ = 0;
    for (size_t i = 0; i < got[0].size(); ++i) differ += !(got[0][i] == got[1][i]);
    EXPECT_EQ(differ, 0) << p.name() << " " << c.tile << " splits=" << c.splits
                         << ": elements that differ between the two split-K transports";
  }
  // The chooser splits within a cluster without a workspace where it pays (small M, few tiles).
  Problem p;
  p.make(64, 2112, 7168, OutType::kBF16, Inputs::kSmallInts, seed_for(350));
  Fp8BlockScaledArgs x = dense_args(p);
  ASSERT_TRUE(fp8_blockscaled_gemm(x, nullptr).ok());
  CUDA_OK(cudaDeviceSynchronize());
  expect_exact(p, p.read(p.d.p), "dense chosen without a workspace");
}

// Split within a cluster under stream capture, replayed after the inputs change: exact.
TEST_F(BlockScaledGpu, DenseClusterSplitCapturedGraphReplays) {
  Problem p;
  p.make(100, 320, 2048, OutType::kBF16, Inputs::kSmallInts, seed_for(370));
  BlockScaledConfig cfg;
  ASSERT_TRUE(parse_blockscaled_config("bm=64,bn=64,splits=3,creduce=1", &cfg).ok());
  bench::OwnedStream s;
  ASSERT_TRUE(s.create().ok());
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CUDA_OK(cudaStreamBeginCapture(s.s, cudaStreamCaptureModeThreadLocal));
  const Status st = fp8_blockscaled_gemm(dense_args(p), s.s, &cfg);
  CUDA_OK(cudaStreamEndCapture(s.s, &graph));
  ASSERT_TRUE(st.ok()) << st.to_string();
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_OK(cudaGraphLaunch(exec, s.s));
  CUDA_OK(cudaStreamSynchronize(s.s));
  expect_exact(p, p.read(p.d.p), "captured, replay 1");
  // New inputs in the same buffers: the second problem's operands copied over the first's.
  Problem q;
  q.make(100, 320, 2048, OutType::kBF16, Inputs::kSmallInts, seed_for(371));
  CUDA_OK(cudaMemcpy(p.a.p, q.a.p, static_cast<size_t>(q.m) * q.k, cudaMemcpyDeviceToDevice));
  CUDA_OK(cudaMemcpy(p.b.p, q.b.p, static_cast<size_t>(q.n) * q.k, cudaMemcpyDeviceToDevice));
  CUDA_OK(cudaMemcpy(p.sfa.p, q.sfa.p, static_cast<size_t>(q.kblocks()) * q.sfa_ld * 4, cudaMemcpyDeviceToDevice));
  CUDA_OK(cudaMemcpy(p.sfb.p, q.sfb.p, static_cast<size_t>(q.nblocks()) * q.kblocks() * 4, cudaMemcpyDeviceToDevice));
  p.poison();
  CUDA_OK(cudaGraphLaunch(exec, s.s));
  CUDA_OK(cudaStreamSynchronize(s.s));
  expect_exact(q, p.read(p.d.p), "captured, replay 2");
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

// Within a cluster where no kernel reduces that way is refused, not run through the workspace.
TEST_F(BlockScaledGpu, DenseRefusesClusterSplitWhereNotCompiled) {
  Problem p;
  p.make(128, 512, 2048, OutType::kBF16, Inputs::kSmallInts, seed_for(360));
  for (const char* text : {"bn=128,splits=2,creduce=1", "bm=64,bn=64,splits=1,creduce=1",
                           "bm=64,bn=64,splits=4,creduce=1", "bm=128,bn=64,splits=3,creduce=1"}) {
    BlockScaledConfig c;
    ASSERT_TRUE(parse_blockscaled_config(text, &c).ok()) << text;
    const Status st = run_dense(p, &c);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << text << ": " << st.to_string();
    EXPECT_NE(st.message().find("creduce=1 needs"), std::string::npos) << st.to_string();
  }
  Problem f;
  f.make(128, 512, 2048, OutType::kFP32, Inputs::kSmallInts, seed_for(361));
  BlockScaledConfig c;
  ASSERT_TRUE(parse_blockscaled_config("bm=64,bn=64,splits=2,creduce=1", &c).ok());
  EXPECT_EQ(run_dense(f, &c).code(), StatusCode::kInvalidArgument);
  BlockScaledConfig bad;
  EXPECT_FALSE(parse_blockscaled_config("creduce=2", &bad).ok());
}

TEST_F(BlockScaledGpu, DenseRandomVsCublasLt) {
  struct S { int m, n, k; OutType out; };
  // cuBLASLt's block-scaled modes need M and N multiples of 4 (the exact tests cover M = 129).
  const S shapes[] = {{256, 512, 1024, OutType::kBF16}, {132, 384, 7168, OutType::kBF16},
                      {64, 256, 2048, OutType::kFP32}, {1000, 1024, 512, OutType::kBF16}};
  int salt = 100;
  for (const auto& s : shapes)
    for (int block_n : {0, 48, 64, 80, 128, 144, 192, 256}) {
      Problem p;
      p.make(s.m, s.n, s.k, s.out, Inputs::kUniform, seed_for(++salt));
      BlockScaledConfig cfg;
      cfg.block_n = block_n;
      const Status st = run_dense(p, block_n ? &cfg : nullptr);  // 0: the chooser (splits where it pays)
      ASSERT_TRUE(st.ok()) << st.to_string();
      const auto got = p.read(p.d.p);
      // cuBLASLt's block-scaled FP8 on the same inputs: its error is the bar.
      bench::CublasLtFp8BlockScaled lt;
      bench::DeviceBuffer dl;
      ASSERT_TRUE(dl.alloc(p.out_bytes()).ok());
      Status lst = lt.plan(p.m, p.n, p.k, p.out);
      if (lst.ok()) lst = lt.convert_scales(static_cast<const float*>(p.sfa.p), p.sfa_ld, static_cast<const float*>(p.sfb.p), nullptr);
      if (lst.ok()) lst = lt.run(p.a.p, p.b.p, dl.p, nullptr);
      CUDA_OK(cudaDeviceSynchronize());
      if (!lst.ok()) {
        ADD_FAILURE() << p.name() << ": cuBLASLt block-scaled baseline failed: " << lst.to_string();
        expect_close(p, got, "dense bn=" + std::to_string(block_n));
        continue;
      }
      const auto ref = p.reference();
      const auto el = reference::compare(ref, p.read(dl.p));
      expect_close(p, got, "dense bn=" + std::to_string(block_n), &el);
    }
}

// Runs the grouped GEMM over `probs` (descriptors copied to the device) and checks every group.
void run_grouped(std::vector<std::unique_ptr<Problem>>& probs, Inputs in, const std::string& what,
                 const BlockScaledConfig* cfg = nullptr) {
  const int G = static_cast<int>(probs.size());
  std::vector<Fp8GroupedProblem> host(G);
  for (int g = 0; g < G; ++g) host[g] = probs[g]->descriptor();
  ASSERT_TRUE(fp8_grouped_validate(host.data(), G).ok());
  bench::DeviceBuffer dp, ws;
  ASSERT_TRUE(dp.alloc(sizeof(Fp8GroupedProblem) * G).ok());
  const size_t wsb = fp8_grouped_workspace_size(G);
  ASSERT_TRUE(ws.alloc(wsb).ok());
  CUDA_OK(cudaMemcpy(dp.p, host.data(), sizeof(Fp8GroupedProblem) * G, cudaMemcpyHostToDevice));
  const OutType out = probs[0]->out;
  const Status st = fp8_grouped_gemm(static_cast<Fp8GroupedProblem*>(dp.p), G, out, ws.p, wsb, nullptr, cfg);
  ASSERT_TRUE(st.ok()) << st.to_string();
  const Status cs = fp8_grouped_check_status(ws.p, nullptr);
  EXPECT_TRUE(cs.ok()) << cs.to_string();
  CUDA_OK(cudaDeviceSynchronize());
  for (int g = 0; g < G; ++g) {
    const Problem& p = *probs[g];
    if (p.m == 0) continue;
    const std::string name = what + " group " + std::to_string(g);
    if (in == Inputs::kSmallInts) expect_exact(p, p.read(p.d.p), name);
    else expect_close(p, p.read(p.d.p), name);
  }
}

TEST_F(BlockScaledGpu, GroupedEdgeGroupsExact) {
  // Empty groups (first, middle, last), M = 1, 127, 129, mixed N and K per group.
  struct S { int m, n, k; };
  const S shapes[] = {{0, 128, 128}, {1, 128, 256}, {127, 144, 384}, {0, 64, 64},
                      {129, 256, 1040}, {256, 16, 128}, {3, 512, 2048}, {0, 16, 16}};
  int salt = 200;
  for (const BlockScaledConfig& cfg : tile_configs())
    for (OutType out : {OutType::kBF16, OutType::kFP32}) {
      if (!grouped_compiled(cfg, out)) continue;  // refused (GroupedRefusesWhatIsNotCompiled)
      std::vector<std::unique_ptr<Problem>> probs;
      for (const auto& s : shapes) {
        probs.emplace_back(new Problem);
        probs.back()->make(s.m, s.n, s.k, out, Inputs::kSmallInts, seed_for(++salt));
      }
      run_grouped(probs, Inputs::kSmallInts,
                  std::string(out == OutType::kFP32 ? "grouped fp32 " : "grouped bf16 ") + cfg.to_string(), &cfg);
    }
}

TEST_F(BlockScaledGpu, GroupedRandom) {
  const int ms[] = {80, 176, 128, 72, 64, 248, 96, 160};
  std::vector<std::unique_ptr<Problem>> probs;
  int salt = 300;
  for (int m : ms) {
    probs.emplace_back(new Problem);
    probs.back()->make(m, 512, 1024, OutType::kBF16, Inputs::kUniform, seed_for(++salt));
  }
  run_grouped(probs, Inputs::kUniform, "grouped random");
}

// More groups than the kernel's shared-memory group table (the global-memory lookup) and more
// than one chunk of the preparation kernel's scan.
TEST_F(BlockScaledGpu, GroupedManyTinyGroups) {
  std::vector<std::unique_ptr<Problem>> probs;
  for (int g = 0; g < 1100; ++g) {
    probs.emplace_back(new Problem);
    probs.back()->make(g % 4, 16 * (1 + g % 3), 16 * (1 + g % 2), OutType::kBF16, Inputs::kSmallInts, seed_for(400 + g));
  }
  run_grouped(probs, Inputs::kSmallInts, "grouped x1100");
}

// Captured once, replayed with descriptors rewritten on the device between replays: the second
// replay must compute the new sizes and pointers.
TEST_F(BlockScaledGpu, GroupedGraphReplayNewDescriptors) {
  const int G = 4;
  std::vector<std::unique_ptr<Problem>> first, second;
  const int m1[G] = {64, 0, 200, 17}, m2[G] = {0, 130, 5, 256};
  for (int g = 0; g < G; ++g) {
    first.emplace_back(new Problem);
    first.back()->make(m1[g], 256, 512, OutType::kBF16, Inputs::kSmallInts, seed_for(1500 + g));
    second.emplace_back(new Problem);
    second.back()->make(m2[g], 128 + 16 * g, 256, OutType::kBF16, Inputs::kSmallInts, seed_for(1600 + g));
  }
  std::vector<Fp8GroupedProblem> h1(G), h2(G);
  for (int g = 0; g < G; ++g) {
    h1[g] = first[g]->descriptor();
    h2[g] = second[g]->descriptor();
  }
  bench::DeviceBuffer dp, ws;
  ASSERT_TRUE(dp.alloc(sizeof(Fp8GroupedProblem) * G).ok());
  const size_t wsb = fp8_grouped_workspace_size(G);
  ASSERT_TRUE(ws.alloc(wsb).ok());
  bench::OwnedStream s;
  ASSERT_TRUE(s.create().ok());
  CUDA_OK(cudaMemcpy(dp.p, h1.data(), sizeof(Fp8GroupedProblem) * G, cudaMemcpyHostToDevice));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CUDA_OK(cudaStreamBeginCapture(s.s, cudaStreamCaptureModeThreadLocal));
  const Status st = fp8_grouped_gemm(static_cast<Fp8GroupedProblem*>(dp.p), G, OutType::kBF16, ws.p, wsb, s.s);
  CUDA_OK(cudaStreamEndCapture(s.s, &graph));
  ASSERT_TRUE(st.ok()) << st.to_string();
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_OK(cudaGraphLaunch(exec, s.s));
  CUDA_OK(cudaStreamSynchronize(s.s));
  for (int g = 0; g < G; ++g)
    if (first[g]->m) expect_exact(*first[g], first[g]->read(first[g]->d.p), "graph replay 1 group " + std::to_string(g));
  CUDA_OK(cudaMemcpyAsync(dp.p, h2.data(), sizeof(Fp8GroupedProblem) * G, cudaMemcpyHostToDevice, s.s));
  CUDA_OK(cudaGraphLaunch(exec, s.s));
  CUDA_OK(cudaStreamSynchronize(s.s));
  for (int g = 0; g < G; ++g)
    if (second[g]->m) expect_exact(*second[g], second[g]->read(second[g]->d.p), "graph replay 2 group " + std::to_string(g));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

// A bad descriptor on the device: that group is skipped (its output stays poisoned), the others
// are computed, and the status word names it.
TEST_F(BlockScaledGpu, GroupedBadDescriptorReported) {
  std::vector<std::unique_ptr<Problem>> probs;
  for (int g = 0; g < 3; ++g) {
    probs.emplace_back(new Problem);
    probs.back()->make(100 + g, 128, 256, OutType::kBF16, Inputs::kSmallInts, seed_for(1700 + g));
  }
  std::vector<Fp8GroupedProblem> host(3);
  for (int g = 0; g < 3; ++g) host[g] = probs[g]->descriptor();
  host[1].sfb = nullptr;
  EXPECT_FALSE(fp8_grouped_validate(host.data(), 3).ok());
  bench::DeviceBuffer dp, ws;
  ASSERT_TRUE(dp.alloc(sizeof(Fp8GroupedProblem) * 3).ok());
  ASSERT_TRUE(ws.alloc(fp8_grouped_workspace_size(3)).ok());
  CUDA_OK(cudaMemcpy(dp.p, host.data(), sizeof(Fp8GroupedProblem) * 3, cudaMemcpyHostToDevice));
  ASSERT_TRUE(fp8_grouped_gemm(static_cast<Fp8GroupedProblem*>(dp.p), 3, OutType::kBF16, ws.p,
                               fp8_grouped_workspace_size(3), nullptr)
                  .ok());
  const Status cs = fp8_grouped_check_status(ws.p, nullptr);
  EXPECT_FALSE(cs.ok());
  EXPECT_NE(cs.message().find("group 1"), std::string::npos) << cs.to_string();
  expect_exact(*probs[0], probs[0]->read(probs[0]->d.p), "bad-descriptor run group 0");
  expect_exact(*probs[2], probs[2]->read(probs[2]->d.p), "bad-descriptor run group 2");
  const auto skipped = probs[1]->read(probs[1]->d.p);
  int64_t written = 0;
  for (double v : skipped) written += std::isnan(v) ? 0 : 1;
  EXPECT_EQ(written, 0) << "the invalid group's output was written";
}

// One group's descriptor in device memory and a workspace for it.
struct OneGroupOnDevice {
  bench::DeviceBuffer problem, ws;
  size_t ws_bytes = fp8_grouped_workspace_size(1);
  Status upload(const Fp8GroupedProblem& d) {
    LOWBIT_RETURN_IF_ERROR(problem.alloc(sizeof(Fp8GroupedProblem)));
    LOWBIT_RETURN_IF_ERROR(ws.alloc(ws_bytes));
    const cudaError_t e = cudaMemcpy(problem.p, &d, sizeof(Fp8GroupedProblem), cudaMemcpyHostToDevice);
    return e == cudaSuccess ? Status::Ok() : Status::Invalid(cudaGetErrorString(e));
  }
  Fp8GroupedProblem* problems() const { return static_cast<Fp8GroupedProblem*>(problem.p); }
  Status run(OutType out, const BlockScaledConfig* cfg = nullptr) const {
    return fp8_grouped_gemm(problems(), 1, out, ws.p, ws_bytes, nullptr, cfg);
  }
};

// A grouped kernel that is not compiled (variants.def) is refused with the compiled ones named,
// not run as another one; the default for each output is one that is.
TEST_F(BlockScaledGpu, GroupedRefusesWhatIsNotCompiled) {
  for (OutType out : {OutType::kBF16, OutType::kFP32}) {
    Problem p;
    p.make(64, 128, 256, out, Inputs::kSmallInts, seed_for(1700 + static_cast<int>(out)));
    OneGroupOnDevice g;
    ASSERT_TRUE(g.upload(p.descriptor()).ok());
    const char* bad = out == OutType::kFP32 ? "bn=256" : "overlap=0";
    BlockScaledConfig c;
    ASSERT_TRUE(parse_blockscaled_config(bad, &c).ok());
    Status st = g.run(out, &c);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << bad << ": " << st.to_string();
    EXPECT_NE(st.message().find("compiled:"), std::string::npos) << st.message();
    if (out == OutType::kFP32) {
      ASSERT_TRUE(parse_blockscaled_config("overlap=1", &c).ok());
      st = g.run(out, &c);
      EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
    }
    st = g.run(out);
    ASSERT_TRUE(st.ok()) << st.to_string();
    CUDA_OK(cudaDeviceSynchronize());
    expect_exact(p, p.read(p.d.p), "the default grouped kernel after the refused calls");
  }
}

// Host memory where the device copy belongs (fp8_grouped_validate takes the host array, so the
// mix-up is easy): refused with a message, instead of an illegal address that ends the context.
TEST_F(BlockScaledGpu, GroupedRefusesPageableHostMemory) {
  int dev = 0, pageable = 0;
  CUDA_OK(cudaGetDevice(&dev));
  CUDA_OK(cudaDeviceGetAttribute(&pageable, cudaDevAttrPageableMemoryAccess, dev));
  if (pageable) {
    GTEST_SKIP() << "this device reads pageable host memory (HMM): host descriptors are legal here";
  }
  Problem p;
  p.make(64, 128, 256, OutType::kBF16, Inputs::kSmallInts, seed_for(1800));
  std::vector<Fp8GroupedProblem> host(1, p.descriptor());
  ASSERT_TRUE(fp8_grouped_validate(host.data(), 1).ok());
  OneGroupOnDevice g;
  ASSERT_TRUE(g.upload(host[0]).ok());
  const size_t wsb = g.ws_bytes;
  std::vector<uint8_t> host_ws(wsb + 128);
  void* host_ws_aligned = host_ws.data() + (128 - reinterpret_cast<uintptr_t>(host_ws.data()) % 128) % 128;
  Status st = fp8_grouped_gemm(host.data(), 1, OutType::kBF16, g.ws.p, wsb, nullptr);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  EXPECT_NE(st.message().find("problem array"), std::string::npos) << st.message();
  st = fp8_grouped_gemm(g.problems(), 1, OutType::kBF16, host_ws_aligned, wsb, nullptr);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  EXPECT_NE(st.message().find("workspace"), std::string::npos) << st.message();
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaGetLastError());
  // The context is intact: the device copies run.
  st = g.run(OutType::kBF16);
  ASSERT_TRUE(st.ok()) << st.to_string();
  CUDA_OK(cudaDeviceSynchronize());
  expect_exact(p, p.read(p.d.p), "after the refused calls");
}

// The status check synchronizes, which a capturing stream forbids: it refuses instead of
// invalidating the caller's capture, and works once the stream is no longer capturing.
TEST_F(BlockScaledGpu, CheckStatusRefusesACapturingStream) {
  bench::DeviceBuffer ws;
  ASSERT_TRUE(ws.alloc(fp8_grouped_workspace_size(1)).ok());
  CUDA_OK(cudaMemset(ws.p, 0, fp8_grouped_workspace_size(1)));
  bench::OwnedStream s;
  ASSERT_TRUE(s.create().ok());
  CUDA_OK(cudaStreamBeginCapture(s.s, cudaStreamCaptureModeThreadLocal));
  const Status st = fp8_grouped_check_status(ws.p, s.s);
  cudaGraph_t graph = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(s.s, &graph), cudaSuccess) << "the check invalidated the capture";
  if (graph) cudaGraphDestroy(graph);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  EXPECT_NE(st.message().find("capturing"), std::string::npos) << st.message();
  const Status after = fp8_grouped_check_status(ws.p, s.s);
  EXPECT_TRUE(after.ok()) << after.to_string();
}

// ---- the masked layout: G groups' slabs one after the other, masked_m[g] valid rows each.
// Each group is a Problem of max_m rows (its reference's first masked_m[g] rows are what the call
// computes); the slabs are copies of the groups' buffers, D poisoned, masked_m on the device.
struct MaskedSet {
  int groups = 0, max_m = 0, n = 0, k = 0;
  OutType out = OutType::kBF16;
  std::vector<std::unique_ptr<Problem>> g;
  bench::DeviceBuffer a, b, d, sfa, sfb, counts, ws;

  void make(int groups_, int max_m_, int n_, int k_, OutType o, const std::vector<int>& masked, int salt) {
    groups = groups_;
    max_m = max_m_;
    n = n_;
    k = k_;
    out = o;
    for (int i = 0; i < groups; ++i) {
      g.emplace_back(new Problem);
      g.back()->make(max_m, n, k, out, Inputs::kSmallInts, seed_for(salt + i));
    }
    const Problem& p0 = *g[0];
    const size_t sa = static_cast<size_t>(max_m) * k, sb = static_cast<size_t>(n) * k, sd = p0.out_bytes();
    const size_t ssa = static_cast<size_t>(p0.kblocks()) * p0.sfa_ld * 4, ssb = static_cast<size_t>(p0.nblocks()) * p0.kblocks() * 4;
    ASSERT_TRUE(a.alloc(sa * groups).ok());
    ASSERT_TRUE(b.alloc(sb * groups).ok());
    ASSERT_TRUE(d.alloc(sd * groups).ok());
    ASSERT_TRUE(sfa.alloc(ssa * groups).ok());
    ASSERT_TRUE(sfb.alloc(ssb * groups).ok());
    ASSERT_TRUE(counts.alloc(sizeof(int) * groups).ok());
    ASSERT_TRUE(ws.alloc(fp8_grouped_masked_workspace_size(groups)).ok());
    for (int i = 0; i < groups; ++i) {
      CUDA_OK(cudaMemcpy(static_cast<char*>(a.p) + i * sa, g[i]->a.p, sa, cudaMemcpyDeviceToDevice));
      CUDA_OK(cudaMemcpy(static_cast<char*>(b.p) + i * sb, g[i]->b.p, sb, cudaMemcpyDeviceToDevice));
      CUDA_OK(cudaMemcpy(static_cast<char*>(sfa.p) + i * ssa, g[i]->sfa.p, ssa, cudaMemcpyDeviceToDevice));
      CUDA_OK(cudaMemcpy(static_cast<char*>(sfb.p) + i * ssb, g[i]->sfb.p, ssb, cudaMemcpyDeviceToDevice));
    }
    ASSERT_EQ(bench::fill_u16(d.p, sd * groups / 2, 0xFFFF, nullptr), cudaSuccess);  // NaN
    set_counts(masked, nullptr);
  }
  void set_counts(const std::vector<int>& masked, cudaStream_t s) {
    CUDA_OK(cudaMemcpyAsync(counts.p, masked.data(), sizeof(int) * groups, cudaMemcpyHostToDevice, s));
    CUDA_OK(cudaStreamSynchronize(s));
  }
  Fp8MaskedGroupedArgs args() const {
    Fp8MaskedGroupedArgs x;
    x.groups = groups;
    x.max_m = max_m;
    x.n = n;
    x.k = k;
    x.a = a.p;
    x.b = b.p;
    x.d = d.p;
    x.sfa = static_cast<const float*>(sfa.p);
    x.sfa_ld = g[0]->sfa_ld;
    x.sfb = static_cast<const float*>(sfb.p);
    x.masked_m = static_cast<const int*>(counts.p);
    x.out_type = out;
    x.workspace = ws.p;
    x.workspace_bytes = fp8_grouped_masked_workspace_size(groups);
    return x;
  }
  // Group i's first `valid` rows equal its reference exactly; every later row is still poison.
  void expect(int i, int valid, const std::string& what) const {
    const Problem& p = *g[i];
    const auto got = p.read(static_cast<const char*>(d.p) + i * p.out_bytes());
    const auto ref = p.reference();
    int64_t bad = 0, written = 0;
    for (size_t e = 0; e < ref.size(); ++e) {
      const bool valid_row = static_cast<int>(e / n) < valid;
      if (valid_row && !(got[e] == round_to_out(ref[e], out))) {
        if (bad < 5)
          ADD_FAILURE() << what << " group " << i << ": element (" << e / n << ", " << e % n << ") = " << got[e]
                        << ", want " << round_to_out(ref[e], out);
        ++bad;
      }
      if (!valid_row && !std::isnan(got[e])) ++written;
    }
    EXPECT_EQ(bad, 0) << what << " group " << i;
    EXPECT_EQ(written, 0) << what << " group " << i << ": rows at or past masked_m = " << valid << " were written";
  }
};

TEST_F(BlockScaledGpu, MaskedExact) {
  // Empty, one-row, partial-tile and full groups; N not a multiple of the tile.
  const std::vector<int> masked = {0, 1, 129, 200, 77};
  int salt = 2000;
  for (const BlockScaledConfig& cfg : tile_configs())
    for (OutType out : {OutType::kBF16, OutType::kFP32}) {
      if (!grouped_compiled(cfg, out)) continue;  // refused (GroupedRefusesWhatIsNotCompiled)
      MaskedSet m;
      m.make(5, 200, 272, 384, out, masked, salt += 10);
      const Status st = fp8_grouped_gemm_masked(m.args(), nullptr, &cfg);
      ASSERT_TRUE(st.ok()) << st.to_string();
      const Status cs = fp8_grouped_check_status(m.ws.p, nullptr);
      EXPECT_TRUE(cs.ok()) << cs.to_string();
      for (int i = 0; i < 5; ++i)
        m.expect(i, masked[i], std::string("masked ") + (out == OutType::kFP32 ? "fp32 " : "bf16 ") + cfg.to_string());
    }
}

// Captured once, replayed after the counts change on the device (the decode step's routing).
TEST_F(BlockScaledGpu, MaskedGraphReplayNewCounts) {
  MaskedSet m;
  m.make(4, 64, 128, 256, OutType::kBF16, {64, 0, 3, 17}, 2100);
  bench::OwnedStream s;
  ASSERT_TRUE(s.create().ok());
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CUDA_OK(cudaStreamBeginCapture(s.s, cudaStreamCaptureModeThreadLocal));
  const Status st = fp8_grouped_gemm_masked(m.args(), s.s);
  CUDA_OK(cudaStreamEndCapture(s.s, &graph));
  ASSERT_TRUE(st.ok()) << st.to_string();
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_OK(cudaGraphLaunch(exec, s.s));
  CUDA_OK(cudaStreamSynchronize(s.s));
  const int first[4] = {64, 0, 3, 17};
  for (int i = 0; i < 4; ++i) m.expect(i, first[i], "graph replay 1");
  ASSERT_EQ(bench::fill_u16(m.d.p, m.g[0]->out_bytes() * 4 / 2, 0xFFFF, s.s), cudaSuccess);
  const std::vector<int> second = {5, 64, 0, 40};
  m.set_counts(second, s.s);
  CUDA_OK(cudaGraphLaunch(exec, s.s));
  CUDA_OK(cudaStreamSynchronize(s.s));
  for (int i = 0; i < 4; ++i) m.expect(i, second[i], "graph replay 2");
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

// A count outside [0, max_m] on the device: that group is skipped and named in the status block;
// the others are computed. Bad host arguments are refused before anything is launched.
TEST_F(BlockScaledGpu, MaskedBadCountsReportedAndBadArgumentsRefused) {
  MaskedSet m;
  m.make(4, 64, 128, 256, OutType::kBF16, {10, -1, 65, 64}, 2200);
  ASSERT_TRUE(fp8_grouped_gemm_masked(m.args(), nullptr).ok());
  const Status cs = fp8_grouped_check_status(m.ws.p, nullptr);
  EXPECT_FALSE(cs.ok());
  EXPECT_NE(cs.message().find("group 1"), std::string::npos) << cs.to_string();
  EXPECT_NE(cs.message().find("group 2"), std::string::npos) << cs.to_string();
  EXPECT_NE(cs.message().find("masked_m"), std::string::npos) << cs.to_string();
  m.expect(0, 10, "bad counts");
  m.expect(1, 0, "bad counts");
  m.expect(2, 0, "bad counts");
  m.expect(3, 64, "bad counts");
  auto refused = [&](Fp8MaskedGroupedArgs x, StatusCode code, const char* what) {
    const Status st = fp8_grouped_gemm_masked(x, nullptr);
    EXPECT_EQ(st.code(), code) << what << ": " << st.to_string();
    EXPECT_EQ(cudaGetLastError(), cudaSuccess) << what;
  };
  Fp8MaskedGroupedArgs x = m.args();
  x.masked_m = nullptr;
  refused(x, StatusCode::kInvalidArgument, "null masked_m");
  x = m.args();
  x.sfa_ld = 60;
  refused(x, StatusCode::kInvalidArgument, "sfa_ld below max_m");
  x = m.args();
  x.n = 100;
  refused(x, StatusCode::kInvalidArgument, "n not a multiple of 16");
  x = m.args();
  x.max_m = 0;
  refused(x, StatusCode::kInvalidArgument, "max_m = 0");
  x = m.args();
  x.workspace_bytes = fp8_grouped_workspace_size(4);  // the descriptor-array call's: too small here
  refused(x, StatusCode::kWorkspaceTooSmall, "workspace without room for the descriptors");
  x = m.args();
  x.out_type = OutType::kFP16;
  refused(x, StatusCode::kInvalidArgument, "FP16 out");
  BlockScaledConfig bad;
  bad.block_m = 64;
  const Status st = fp8_grouped_gemm_masked(m.args(), nullptr, &bad);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
}

// The kernels' shared-memory opt-in belongs to the CUDA context. Cached per device, it was not
// set again in the context cudaDeviceReset creates, and every later launch failed. ctest runs
// each test in its own process; the sanitizer filters leave this one out (the reset frees every
// allocation of the process).
// The contiguous layout: one A and one D for every group's rows, one after the other at
// offsets[g], one B slab per group; built from one Problem per group (its reference is what its
// rows must hold). `extra` rows past the last group belong to none.
struct ContiguousSet {
  int groups = 0, n = 0, k = 0;
  int64_t rows = 0, sfa_ld = 0;
  OutType out = OutType::kBF16;
  std::vector<int> offsets;
  std::vector<std::unique_ptr<Problem>> g;
  bench::DeviceBuffer a, b, d, sfa, sfb, offs, ws;

  void make(const std::vector<int>& sizes, int extra, int n_, int k_, OutType o, int salt) {
    groups = static_cast<int>(sizes.size());
    n = n_;
    k = k_;
    out = o;
    offsets.assign(1, 0);
    for (int m : sizes) offsets.push_back(offsets.back() + m);
    rows = offsets.back() + extra;
    sfa_ld = (rows + 3) / 4 * 4;
    for (int i = 0; i < groups; ++i) {
      g.emplace_back(new Problem);
      g.back()->make(sizes[i], n, k, out, Inputs::kSmallInts, seed_for(salt + i));
    }
    const int kb = g[0]->kblocks(), nb = g[0]->nblocks();
    const size_t sb = static_cast<size_t>(n) * k, ssb = static_cast<size_t>(nb) * kb * 4;
    const size_t ob = out == OutType::kFP32 ? 4 : 2;
    ASSERT_TRUE(a.alloc(static_cast<size_t>(rows) * k).ok());
    ASSERT_TRUE(b.alloc(sb * groups).ok());
    ASSERT_TRUE(d.alloc(static_cast<size_t>(rows) * n * ob).ok());
    ASSERT_TRUE(sfa.alloc(static_cast<size_t>(kb) * sfa_ld * 4).ok());
    ASSERT_TRUE(sfb.alloc(ssb * groups).ok());
    ASSERT_TRUE(offs.alloc(sizeof(int) * (groups + 1)).ok());
    ASSERT_TRUE(ws.alloc(fp8_grouped_contiguous_workspace_size(groups)).ok());
    std::vector<float> hsfa(static_cast<size_t>(kb) * sfa_ld, 1.0f);
    for (int i = 0; i < groups; ++i) {
      const Problem& p = *g[i];
      if (p.m > 0) {
        CUDA_OK(cudaMemcpy(static_cast<char*>(a.p) + static_cast<size_t>(offsets[i]) * k, p.a.p,
                           static_cast<size_t>(p.m) * k, cudaMemcpyDeviceToDevice));
      }
      CUDA_OK(cudaMemcpy(static_cast<char*>(b.p) + i * sb, p.b.p, sb, cudaMemcpyDeviceToDevice));
      CUDA_OK(cudaMemcpy(static_cast<char*>(sfb.p) + i * ssb, p.sfb.p, ssb, cudaMemcpyDeviceToDevice));
      for (int kbi = 0; kbi < kb; ++kbi)
        for (int r = 0; r < p.m; ++r) hsfa[static_cast<size_t>(kbi) * sfa_ld + offsets[i] + r] = p.hsfa[kbi * p.sfa_ld + r];
    }
    CUDA_OK(cudaMemcpy(sfa.p, hsfa.data(), hsfa.size() * 4, cudaMemcpyHostToDevice));
    ASSERT_EQ(bench::fill_u16(d.p, static_cast<size_t>(rows) * n * ob / 2, 0xFFFF, nullptr), cudaSuccess);  // NaN
    set_offsets(offsets, nullptr);
  }
  void set_offsets(const std::vector<int>& o, cudaStream_t s) {
    CUDA_OK(cudaMemcpyAsync(offs.p, o.data(), sizeof(int) * (groups + 1), cudaMemcpyHostToDevice, s));
    CUDA_OK(cudaStreamSynchronize(s));
  }
  Fp8ContiguousGroupedArgs args() const {
    Fp8ContiguousGroupedArgs x;
    x.groups = groups;
    x.rows = rows;
    x.n = n;
    x.k = k;
    x.a = a.p;
    x.b = b.p;
    x.d = d.p;
    x.sfa = static_cast<const float*>(sfa.p);
    x.sfa_ld = sfa_ld;
    x.sfb = static_cast<const float*>(sfb.p);
    x.offsets = static_cast<const int*>(offs.p);
    x.out_type = out;
    x.workspace = ws.p;
    x.workspace_bytes = fp8_grouped_contiguous_workspace_size(groups);
    return x;
  }
  // D read back whole, as doubles.
  std::vector<double> read_all() const {
    Problem whole;
    whole.m = static_cast<int>(rows);
    whole.n = n;
    whole.out = out;
    return whole.read(d.p);
  }
  // Group i's rows (at offsets[i]) equal its reference exactly, or are all still poison (skipped).
  void expect(const std::vector<double>& got, int i, bool computed, const std::string& what) const {
    const Problem& p = *g[i];
    const auto ref = p.reference();
    int64_t bad = 0;
    for (size_t e = 0; e < ref.size(); ++e) {
      const double v = got[static_cast<size_t>(offsets[i]) * n + e];
      if (computed ? !(v == round_to_out(ref[e], out)) : !std::isnan(v)) {
        if (bad < 5)
          ADD_FAILURE() << what << " group " << i << ": element (" << e / n << ", " << e % n << ") = " << v
                        << (computed ? ", want " + std::to_string(round_to_out(ref[e], out)) : ", want unwritten");
        ++bad;
      }
    }
    EXPECT_EQ(bad, 0) << what << " group " << i;
  }
  // Rows from `first` on belong to no group: never written.
  void expect_unwritten_from(const std::vector<double>& got, int64_t first, const std::string& what) const {
    int64_t written = 0;
    for (size_t e = static_cast<size_t>(first) * n; e < got.size(); ++e) written += !std::isnan(got[e]);
    EXPECT_EQ(written, 0) << what << ": rows from " << first << " belong to no group but were written";
  }
};

TEST_F(BlockScaledGpu, ContiguousExact) {
  // Groups of 128, 0, 4, 132, 200 and 77 rows (starts 0, 128, 128, 132, 264, 464: multiples of 4,
  // sizes not multiples of 128), then 7 rows that belong to no group; N not a multiple of the tile.
  const std::vector<int> sizes = {128, 0, 4, 132, 200, 77};
  int salt = 3000;
  for (const BlockScaledConfig& cfg : tile_configs())
    for (OutType out : {OutType::kBF16, OutType::kFP32}) {
      if (!grouped_compiled(cfg, out)) continue;  // refused (GroupedRefusesWhatIsNotCompiled)
      ContiguousSet c;
      c.make(sizes, 7, 272, 384, out, salt += 10);
      const Status st = fp8_grouped_gemm_contiguous(c.args(), nullptr, &cfg);
      ASSERT_TRUE(st.ok()) << st.to_string();
      const Status cs = fp8_grouped_check_status(c.ws.p, nullptr);
      EXPECT_TRUE(cs.ok()) << cs.to_string();
      const std::string what = std::string("contiguous ") + (out == OutType::kFP32 ? "fp32 " : "bf16 ") + cfg.to_string();
      const auto got = c.read_all();
      for (int i = 0; i < c.groups; ++i) c.expect(got, i, true, what);
      c.expect_unwritten_from(got, c.offsets.back(), what);
    }
}

// Captured once, replayed after the offsets change on the device (the prefill step's routing).
TEST_F(BlockScaledGpu, ContiguousGraphReplayNewOffsets) {
  ContiguousSet c;
  c.make({64, 0, 36, 100}, 4, 128, 256, OutType::kBF16, 3100);
  bench::OwnedStream s;
  ASSERT_TRUE(s.create().ok());
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CUDA_OK(cudaStreamBeginCapture(s.s, cudaStreamCaptureModeThreadLocal));
  const Status st = fp8_grouped_gemm_contiguous(c.args(), s.s);
  CUDA_OK(cudaStreamEndCapture(s.s, &graph));
  ASSERT_TRUE(st.ok()) << st.to_string();
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_OK(cudaGraphLaunch(exec, s.s));
  CUDA_OK(cudaStreamSynchronize(s.s));
  auto got = c.read_all();
  for (int i = 0; i < 4; ++i) c.expect(got, i, true, "graph replay 1");
  c.expect_unwritten_from(got, 200, "graph replay 1");
  // On the replay group 0 keeps its first 8 rows and the others are empty: every later row
  // belongs to no group and stays poisoned.
  ASSERT_EQ(bench::fill_u16(c.d.p, static_cast<size_t>(c.rows) * c.n, 0xFFFF, s.s), cudaSuccess);
  c.set_offsets({0, 8, 8, 8, 8}, s.s);
  CUDA_OK(cudaGraphLaunch(exec, s.s));
  CUDA_OK(cudaStreamSynchronize(s.s));
  got = c.read_all();
  const auto ref0 = c.g[0]->reference();
  int64_t bad = 0;
  for (int64_t r = 0; r < c.rows; ++r)
    for (int j = 0; j < c.n; ++j) {
      const double v = got[static_cast<size_t>(r) * c.n + j];
      const bool ok = r < 8 ? v == round_to_out(ref0[static_cast<size_t>(r) * c.n + j], c.out) : std::isnan(v);
      if (!ok && bad++ < 5) ADD_FAILURE() << "graph replay 2: element (" << r << ", " << j << ") = " << v;
    }
  EXPECT_EQ(bad, 0);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

// Offsets that break the rules on the device: those groups are skipped and named in the status
// block, the others computed. Bad host arguments are refused before anything is launched.
TEST_F(BlockScaledGpu, ContiguousBadOffsetsReportedAndBadArgumentsRefused) {
  ContiguousSet c;
  c.make({8, 8, 8, 8, 8}, 8, 128, 256, OutType::kBF16, 3200);
  // Group 0 is valid and group 1 empty; group 2 ends before it starts, group 3 starts on row 6
  // (not a multiple of 4), group 4 runs past the 48 rows.
  c.set_offsets({0, 8, 8, 6, 32, 60}, nullptr);
  ASSERT_TRUE(fp8_grouped_gemm_contiguous(c.args(), nullptr).ok());
  const Status cs = fp8_grouped_check_status(c.ws.p, nullptr);
  EXPECT_FALSE(cs.ok());
  for (const char* named : {"group 2", "group 3", "group 4", "offsets must be"})
    EXPECT_NE(cs.message().find(named), std::string::npos) << named << ": " << cs.to_string();
  EXPECT_EQ(cs.message().find("group 1"), std::string::npos) << cs.to_string();
  const auto got = c.read_all();
  c.expect(got, 0, true, "valid group beside bad ones");
  c.expect_unwritten_from(got, 8, "skipped groups");

  auto refused = [&](const char* what, const std::function<void(Fp8ContiguousGroupedArgs&)>& edit, StatusCode code) {
    Fp8ContiguousGroupedArgs x = c.args();
    edit(x);
    const Status st = fp8_grouped_gemm_contiguous(x, nullptr);
    EXPECT_EQ(st.code(), code) << what << ": " << st.to_string();
  };
  refused("rows 0", [](Fp8ContiguousGroupedArgs& x) { x.rows = 0; }, StatusCode::kInvalidArgument);
  refused("sfa_ld < rows", [](Fp8ContiguousGroupedArgs& x) { x.sfa_ld = 4; }, StatusCode::kInvalidArgument);
  refused("sfa_ld not a multiple of 4", [](Fp8ContiguousGroupedArgs& x) { x.sfa_ld += 2; }, StatusCode::kInvalidArgument);
  refused("null offsets", [](Fp8ContiguousGroupedArgs& x) { x.offsets = nullptr; }, StatusCode::kInvalidArgument);
  refused("n not a multiple of 16", [](Fp8ContiguousGroupedArgs& x) { x.n = 120; }, StatusCode::kInvalidArgument);
  refused("FP16 out", [](Fp8ContiguousGroupedArgs& x) { x.out_type = OutType::kFP16; }, StatusCode::kInvalidArgument);
  refused("workspace too small", [](Fp8ContiguousGroupedArgs& x) { x.workspace_bytes -= 1; },
          StatusCode::kWorkspaceTooSmall);
  CUDA_OK(cudaDeviceSynchronize());
}

TEST_F(BlockScaledGpu, DeviceResetKeepsKernelsLaunchable) {
  for (int round = 0; round < 2; ++round) {
    {
      Problem p;
      p.make(129, 272, 512, OutType::kBF16, Inputs::kSmallInts, seed_for(1900 + round));
      const Status st = fp8_blockscaled_gemm(dense_args(p), nullptr);
      ASSERT_TRUE(st.ok()) << "round " << round << ": " << st.to_string();
      CUDA_OK(cudaDeviceSynchronize());
      expect_exact(p, p.read(p.d.p), "dense, round " + std::to_string(round));
    }
    if (round == 0) {
      CUDA_OK(cudaDeviceReset());
    }
  }
}

}  // namespace
