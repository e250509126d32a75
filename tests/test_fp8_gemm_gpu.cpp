// FP8 GEMM on the GPU against the FP64 CPU reference on the same E4M3 inputs.
// Skips (with the reason) when there is no Hopper GPU. Label: gpu.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench_util.h"
#include "cublaslt_fp8.h"
#include "device_fill.h"
#include "formats/bf16.h"
#include "formats/e4m3.h"
#include "formats/fp16.h"
#include "lowbit/device.h"
#include "lowbit/gemm.h"
#include "lowbit/patch_embed.h"
#include "reference/reference_gemm.h"
#include "gpu_test_util.h"
#include "test_seed.h"

using namespace lowbit;

namespace {

class Fp8GemmGpu : public lowbit_test::HopperTest {};
using lowbit_test::Buf;


enum class Inputs { kSmallInts, kUniform };

struct Case {
  int64_t m, n, k;
  OutType out = OutType::kBF16;
  bool bias = false;
  Inputs inputs = Inputs::kUniform;
  const char* config = nullptr;  // forced, or null for the chooser
  int64_t row_bcast_rows = 0;    // > 0: add a BF16 [P, n] row-broadcast tensor (positional embedding)
  bool residual = false;         // add a BF16 [m, n] residual
  Activation activation = Activation::kNone;
  void* workspace = nullptr;  // a caller's workspace shared across cases (zero-filled once), or null: one per case
  size_t workspace_bytes = 0;
  bool row_scales = false;  // per-token x per-channel scales (a_row_scale, b_row_scale)
  bool in_place = false;    // with residual and BF16 out: the residual is D itself
};

std::string describe(const Case& c) {
  return std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k) +
         (c.out == OutType::kFP32 ? " fp32" : c.out == OutType::kFP16 ? " fp16" : " bf16") +
         (c.row_scales ? " +row scales" : "") + (c.bias ? " +bias" : "") +
         (c.row_bcast_rows ? " +pos[P=" + std::to_string(c.row_bcast_rows) + "]" : std::string()) +
         (c.activation == Activation::kGelu ? " gelu" : c.activation == Activation::kSilu ? " silu" : "") +
         (c.residual ? (c.in_place ? " +residual in place" : " +residual") : "") +
         (c.inputs == Inputs::kSmallInts ? " ints" : " uniform") + " config=" + (c.config ? c.config : "auto");
}


struct Outcome {
  reference::ErrorStats ours, cublas;
  int64_t mismatches = 0;  // exact-mode element mismatches (or tolerance misses with an activation)
  bool cublas_ok = false;
  std::vector<uint8_t> raw;
};

// Runs lowbit (and cuBLASLt on the same inputs) and checks every output element against the
// FP64 reference. Exact mode (small integers, power-of-two scales) requires bit equality with
// the reference rounded to the output type.
void run_case(const Case& c, Outcome* o, uint64_t seed_offset = 0) {
  const uint64_t seed = lowbit_test::seed() * 7919 + seed_offset + static_cast<uint64_t>(c.m * 31 + c.n * 17 + c.k);
  const size_t ob = c.out == OutType::kFP32 ? 4 : 2;
  Buf A(c.m * c.k), B(c.n * c.k), D(c.m * c.n * ob), Dl(c.m * c.n * ob), bias(c.n * 2), scales(512),
      row_scale(c.m * 4), col_scale(c.n * 4);
  const bool ints = c.inputs == Inputs::kSmallInts;
  if (ints) {
    ASSERT_EQ(bench::fill_e4m3_int(A.p, c.m * c.k, 4, seed, nullptr), cudaSuccess);
    ASSERT_EQ(bench::fill_e4m3_int(B.p, c.n * c.k, 4, seed + 1, nullptr), cudaSuccess);
  } else {
    ASSERT_EQ(bench::fill_e4m3_uniform(A.p, c.m * c.k, 8.0f, seed, nullptr), cudaSuccess);
    ASSERT_EQ(bench::fill_e4m3_uniform(B.p, c.n * c.k, 8.0f, seed + 1, nullptr), cudaSuccess);
  }
  std::vector<uint16_t> hbias(c.n);
  for (int64_t j = 0; j < c.n; ++j)
    hbias[j] = formats::float_to_bf16(ints ? static_cast<float>((j * 7 + seed) % 9) - 4.0f
                                           : 0.25f * static_cast<float>((j * 13 + seed) % 17) - 2.0f);
  CUDA_OK(cudaMemcpy(bias.p, hbias.data(), c.n * 2, cudaMemcpyHostToDevice));
  // Per-token and per-channel scales: powers of two from 1/4 to 4 in exact mode (every value
  // stays exact), else in [0.01, 0.2); hashed per row and column, so a kernel that took another
  // row's or column's scale shows.
  std::vector<float> hrow(c.m), hcol(c.n);
  for (int64_t r = 0; r < c.m; ++r)
    hrow[r] = ints ? std::ldexp(1.0f, static_cast<int>((r * 7 + seed) % 5) - 2)
                   : 0.01f + 0.19f * static_cast<float>((r * 2654435761u + seed) % 1000) / 1000.0f;
  for (int64_t j = 0; j < c.n; ++j)
    hcol[j] = ints ? std::ldexp(1.0f, static_cast<int>((j * 11 + seed + 3) % 5) - 2)
                   : 0.01f + 0.19f * static_cast<float>((j * 40503u + seed + 5) % 1000) / 1000.0f;
  CUDA_OK(cudaMemcpy(row_scale.p, hrow.data(), c.m * 4, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(col_scale.p, hcol.data(), c.n * 4, cudaMemcpyHostToDevice));
  // Epilogue tensors: integers in [-32, 32] (exact in BF16) from a hash of (row, column), so no
  // two rows repeat: a kernel that took the wrong row of pos (row r mod some divisor of P, or
  // off by a period) or of the residual shows. (A pattern in i = r * n + c repeated every 7 rows,
  // so P = 7, 49 and 196 -- W2's period -- could not catch a row reduced mod 7.)
  const int64_t P = c.row_bcast_rows;
  std::vector<uint16_t> hpos(P * c.n), hres(c.residual ? c.m * c.n : 0);
  for (size_t i = 0; i < hpos.size(); ++i) hpos[i] = lowbit_test::hashed_int_bf16(i / c.n, i % c.n, seed, 32);
  for (size_t i = 0; i < hres.size(); ++i) hres[i] = lowbit_test::hashed_int_bf16(i / c.n, i % c.n, seed + 17, 32);
  Buf pos(hpos.size() * 2), res(hres.size() * 2);
  if (!hpos.empty()) {
    CUDA_OK(cudaMemcpy(pos.p, hpos.data(), hpos.size() * 2, cudaMemcpyHostToDevice));
  }
  if (!hres.empty()) {
    CUDA_OK(cudaMemcpy(res.p, hres.data(), hres.size() * 2, cudaMemcpyHostToDevice));
  }
  // Exact mode too scales by powers of two (0.25 in all): every value stays exact, and an
  // epilogue that applied alpha after the bias or row broadcast, or dropped a scale, shows.
  const float hs[2] = {ints ? 2.0f : 0.125f, ints ? 0.5f : 0.0625f};
  const float alpha = ints ? 0.25f : 0.5f;
  CUDA_OK(cudaMemcpy(scales.p, &hs[0], 4, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(static_cast<float*>(scales.p) + 64, &hs[1], 4, cudaMemcpyHostToDevice));
  ASSERT_EQ(bench::fill_u16(D.p, c.m * c.n * ob / 2, 0xFFFF, nullptr), cudaSuccess);  // poison: NaN
  ASSERT_EQ(bench::fill_u16(Dl.p, c.m * c.n * ob / 2, 0xFFFF, nullptr), cudaSuccess);  // the baseline's too
  if (c.in_place) {
    ASSERT_TRUE(c.residual && c.out == OutType::kBF16) << "in place needs a residual and BF16 out";
    CUDA_OK(cudaMemcpy(D.p, hres.data(), hres.size() * 2, cudaMemcpyHostToDevice));
  }

  Fp8GemmConfig cfg;
  const Fp8GemmConfig* forced = nullptr;
  if (c.config) {
    const Status ps = parse_fp8_config(c.config, &cfg);
    ASSERT_TRUE(ps.ok()) << ps.to_string();
    forced = &cfg;
  }
  const size_t wsb = c.workspace ? c.workspace_bytes
                                 : forced ? fp8_gemm_workspace_size(c.m, c.n, c.k, cfg) : (size_t(64) << 20);
  Buf own_ws(c.workspace ? 0 : wsb);
  void* ws_p = c.workspace ? c.workspace : own_ws.p;
  if (!c.workspace) {
    ASSERT_TRUE(workspace_init(ws_p, wsb, nullptr).ok());
  }

  Fp8GemmArgs a;
  a.m = c.m;
  a.n = c.n;
  a.k = c.k;
  a.a = A.p;
  a.b = B.p;
  a.d = D.p;
  a.out_type = c.out;
  a.alpha = alpha;
  a.a_scale = static_cast<float*>(scales.p);
  a.b_scale = static_cast<float*>(scales.p) + 64;
  a.bias = c.bias ? bias.p : nullptr;
  a.a_row_scale = c.row_scales ? static_cast<const float*>(row_scale.p) : nullptr;
  a.b_row_scale = c.row_scales ? static_cast<const float*>(col_scale.p) : nullptr;
  a.row_bcast = P ? pos.p : nullptr;
  a.row_bcast_rows = P;
  a.residual = c.residual ? (c.in_place ? D.p : res.p) : nullptr;
  a.activation = c.activation;
  a.workspace = ws_p;
  a.workspace_bytes = wsb;
  const Status st = fp8_gemm(a, nullptr, forced);
  ASSERT_TRUE(st.ok()) << st.to_string();
  CUDA_OK(cudaDeviceSynchronize());

  // cuBLASLt on the same inputs: its error is the bar for ours. A failure here fails the test
  // but does not hide lowbit's own element checks below.
  // (cuBLASLt has no row-broadcast, residual or GELU-erf epilogue matching ours: those cases are
  // checked element by element against the reference only.)
  // (Nor do these tests plan its outer-vector scaling: the row-scale cases too are checked
  // against the reference alone; lowbit-bench --rowwise compares with cuBLASLt's.)
  const bool plain = P == 0 && !c.residual && c.activation == Activation::kNone && !c.row_scales;
  bench::CublasLtFp8 lt;
  Status lst = plain ? lt.plan(c.m, c.n, c.k, c.out, c.bias, a.a_scale, a.b_scale)
                     : Status::Error(StatusCode::kInvalidArgument, "no matching cuBLASLt epilogue");
  if (lst.ok()) lst = lt.run(A.p, B.p, Dl.p, a.bias, alpha, nullptr);
  o->cublas_ok = lst.ok();
  if (plain && !lst.ok()) ADD_FAILURE() << describe(c) << ": cuBLASLt baseline failed: " << lst.to_string();
  CUDA_OK(cudaDeviceSynchronize());

  std::vector<uint8_t> ha(c.m * c.k), hb(c.n * c.k), hl(c.m * c.n * ob);
  o->raw.resize(c.m * c.n * ob);
  CUDA_OK(cudaMemcpy(ha.data(), A.p, ha.size(), cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(hb.data(), B.p, hb.size(), cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(o->raw.data(), D.p, o->raw.size(), cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(hl.data(), Dl.p, hl.size(), cudaMemcpyDeviceToHost));

  std::vector<float> fpos(hpos.size()), fres(hres.size());
  for (size_t i = 0; i < hpos.size(); ++i) fpos[i] = formats::bf16_to_float(hpos[i]);
  for (size_t i = 0; i < hres.size(); ++i) fres[i] = formats::bf16_to_float(hres[i]);
  std::vector<float> fa(ha.size()), fb(hb.size()), fbias(c.n);
  for (size_t i = 0; i < ha.size(); ++i) fa[i] = formats::e4m3_to_float(ha[i]);
  for (size_t i = 0; i < hb.size(); ++i) fb[i] = formats::e4m3_to_float(hb[i]);
  for (int64_t j = 0; j < c.n; ++j) fbias[j] = formats::bf16_to_float(hbias[j]);
  reference::GemmProblem p;
  p.m = c.m;
  p.n = c.n;
  p.k = c.k;
  p.a = fa.data();
  p.b = fb.data();
  p.alpha = static_cast<double>(alpha) * hs[0] * hs[1];
  p.row_scale = c.row_scales ? hrow.data() : nullptr;
  p.col_scale = c.row_scales ? hcol.data() : nullptr;
  p.bias = c.bias ? fbias.data() : nullptr;
  p.row_bcast = P ? fpos.data() : nullptr;
  p.row_period = P ? P : 1;
  p.residual = c.residual ? fres.data() : nullptr;
  p.activation = c.activation == Activation::kGelu ? 1 : c.activation == Activation::kSilu ? 2 : 0;
  const auto ref = reference::gemm_full(p);
  std::vector<double> got(ref.size()), gotl(ref.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    got[i] = bench::read_output(o->raw, c.out, i);
    gotl[i] = bench::read_output(hl, c.out, i);
  }
  o->ours = reference::compare(ref, got);
  o->cublas = reference::compare(ref, gotl);
  if (ints && c.activation != Activation::kNone) {
    // GELU / SiLU are not exact: FP32 math then one rounding to the output type. For FP32 out
    // the bound (1e-5 relative and absolute) is far under the 4e-4 by which the tanh form of
    // GELU misses the erf form near |x| = 3 (a 1e-3 absolute slack let it pass). BF16 out: the
    // rounding's half ulp (2^-8 relative) plus the FP32 math's own error (the 1e-5 slack).
    const double rel = c.out == OutType::kFP32 ? 1e-5 : 1.0 / 256 + 1e-6;
    const double abs_slack = 1e-5;
    for (size_t i = 0; i < ref.size(); ++i) {
      if (!(std::fabs(got[i] - ref[i]) <= rel * std::fabs(ref[i]) + abs_slack)) {
        if (o->mismatches < 5)
          ADD_FAILURE() << describe(c) << ": element (" << i / c.n << ", " << i % c.n << ") = " << got[i]
                        << ", want " << ref[i];
        ++o->mismatches;
      }
    }
  } else if (ints) {
    for (size_t i = 0; i < ref.size(); ++i) {
      const float r32 = static_cast<float>(ref[i]);
      const double want = c.out == OutType::kFP32   ? static_cast<double>(r32)
                          : c.out == OutType::kFP16 ? formats::fp16_to_float(formats::float_to_fp16(r32))
                                                    : formats::bf16_to_float(formats::float_to_bf16(r32));
      if (!(got[i] == want)) {
        if (o->mismatches < 5)
          ADD_FAILURE() << describe(c) << ": element (" << i / c.n << ", " << i % c.n << ") = " << got[i]
                        << ", want " << want;
        ++o->mismatches;
      }
    }
  }
}

void expect_exact(const Case& c, uint64_t seed_offset = 0) {
  Outcome o;
  run_case(c, &o, seed_offset);
  EXPECT_EQ(o.mismatches, 0) << describe(c);
  EXPECT_EQ(o.ours.nonfinite, 0) << describe(c);
}

void expect_close(const Case& c) {
  Outcome o;
  run_case(c, &o);
  EXPECT_EQ(o.ours.nonfinite, 0) << describe(c) << ": unwritten (poisoned) or non-finite outputs";
  if (o.cublas_ok) {
    // A baseline that wrote nothing (or garbage) would make the 2x bar meaningless.
    EXPECT_EQ(o.cublas.nonfinite, 0) << describe(c) << ": cuBLASLt left outputs unwritten";
    EXPECT_LE(o.ours.rel_fro, 2.0 * o.cublas.rel_fro)
        << describe(c) << ": lowbit " << o.ours.rel_fro << " vs cuBLASLt " << o.cublas.rel_fro;
  }
  // And a ceiling of its own: the output rounding (BF16 ~1.6e-3, FP32 ~1e-4 here) with room.
  EXPECT_LE(o.ours.rel_fro, c.out == OutType::kFP32 ? 5e-4 : 5e-3) << describe(c);
  std::printf("[lowbit] %s: rel err %.3e (cuBLASLt %.3e), max %.3e (cuBLASLt %.3e)\n", describe(c).c_str(),
              o.ours.rel_fro, o.cublas.rel_fro, o.ours.max_rel, o.cublas.max_rel);
}

// The Status of a forced config on an M x 256 x 512 problem (4 K blocks), with or without a
// bias (or a BF16 residual): for the configs the launcher must refuse.
Status run_forced(const char* config, int64_t m, bool with_bias, OutType out = OutType::kBF16, int64_t n = 256,
                  bool with_residual = false) {
  Fp8GemmConfig cfg;
  const Status parsed = parse_fp8_config(config, &cfg);
  if (!parsed.ok()) {  // a typo in the test must not pass as a refusal
    ADD_FAILURE() << "test config does not parse: " << config;
    return Status::Ok();
  }
  Buf A(m * 512), B(n * 512), D(m * n * 4), bias(n * 2), residual(with_residual ? m * n * 2 : 0);
  Fp8GemmArgs a;
  a.m = m;
  a.n = n;
  a.k = 512;
  a.a = A.p;
  a.b = B.p;
  a.d = D.p;
  a.bias = with_bias ? bias.p : nullptr;
  a.residual = with_residual ? residual.p : nullptr;
  a.out_type = out;
  return fp8_gemm(a, nullptr, &cfg);
}

}  // namespace

TEST_F(Fp8GemmGpu, SmallIntegersExactEveryVariant) {
  for (const char* cfg : {"bn=64", "bn=128", "bn=192", "bn=256", "bn=176", "bn=64,splits=3", "bn=128,splits=2",
                          "bn=192,splits=4", "bn=256,splits=3", "bn=176,splits=3", "bn=192,group=1",
                          "bn=64,grid=7,group=3", "bn=64,bm=64", "bn=64,bm=64,splits=3", "bn=64,bm=64,grid=5,group=2",
                          "bn=112,bm=64", "bn=112,bm=64,splits=3", "bn=112,bm=64,grid=5,group=2",
                          // Split within a cluster (BF16 out; FP32 through the workspace), and grids of fewer
                          // clusters than tiles, so the landing places are handed back and refilled.
                          "bn=64,bm=64,splits=2,creduce=0", "bn=64,bm=64,splits=3,grid=6", "bn=64,splits=2,creduce=1",
                          "bn=64,splits=2,grid=4,group=1"}) {
    for (OutType out : {OutType::kBF16, OutType::kFP32}) {
      if (std::string(cfg).find("creduce=1") != std::string::npos && out != OutType::kBF16) continue;
      Case c{256, 384, 512, out, true, Inputs::kSmallInts, cfg};
      expect_exact(c);
    }
  }
}

// The narrow 128-row tiles (80, 96, 112 wide; BF16 out): plain and staged epilogues, split and
// unsplit, on grids of fewer CTAs than units, at edge shapes whose last tile column is partial.
TEST_F(Fp8GemmGpu, NarrowTilesExact) {
  for (const char* cfg : {"bn=80", "bn=96", "bn=112", "bn=80,splits=3", "bn=96,splits=2,grid=5,group=1",
                          "bn=112,grid=3,group=2"})
    for (int64_t m : {1, 129, 256})
      for (int64_t n : {208, 384})
        for (bool bias : {false, true})
          for (bool rows : {false, true}) {
            Case c{m, n, 400, OutType::kBF16, bias, Inputs::kSmallInts, cfg};
            c.row_scales = rows;
            expect_exact(c);
          }
  // Random inputs against the FP64 reference, a shape where the tile fills one wave at two rows.
  expect_close({256, 5120, 1024, OutType::kBF16, false, Inputs::kUniform, "bn=80"});
  expect_close({256, 6144, 1024, OutType::kBF16, true, Inputs::kUniform, "bn=96"});
}

// The last tile row's A box stops at M (gemm::a_tail): M one past a tile row up to one short of the
// next, on every dense kernel kind: plain and staged, split, stream-K, pairs, overlapped, and the
// fused epilogue (a residual, a row broadcast, an activation); uneven columns keep the whole box.
// Every element checked against the FP64 reference on small integers. Fresh inputs for every case,
// so the stage rows a box leaves stale never hold this case's A rows by chance (a short box given
// to the wrong tile row would then still compute right).
TEST_F(Fp8GemmGpu, LastTileRowStopsAtM) {
  uint64_t fresh = 0;
  for (int64_t m : {129, 130, 191, 200, 255, 383})
    for (const char* cfg : {"bn=64", "bn=128", "bn=256", "bn=80", "bn=128,splits=2", "bn=176,promote=2",
                            "bn=128,sk=1,grid=4", "bn=128,cluster=2", "bn=256,promote=2,overlap=1"})
      for (bool rows : {false, true}) {
        if (rows && std::string(cfg).find("cluster=2") != std::string::npos) continue;  // plain epilogue only
        Case c{m, 384, 400, OutType::kBF16, false, Inputs::kSmallInts, cfg};
        c.row_scales = rows;
        expect_exact(c, ++fresh);
      }
  for (int64_t m : {129, 200, 383}) {
    // The fused epilogue: a bias and a residual; a row broadcast; an activation.
    Case c{m, 384, 400, OutType::kBF16, true, Inputs::kSmallInts, "bn=128"};
    c.residual = true;
    expect_exact(c, ++fresh);
    Case r{m, 384, 400, OutType::kBF16, false, Inputs::kSmallInts, "bn=192"};
    r.row_bcast_rows = 50;
    expect_exact(r, ++fresh);
    Case g{m, 384, 400, OutType::kBF16, true, Inputs::kSmallInts, "bn=64"};
    g.activation = Activation::kSilu;
    expect_exact(g, ++fresh);
    // Uneven columns (240- and 256-wide tiles over N = 496).
    expect_exact({m, 496, 400, OutType::kBF16, false, Inputs::kSmallInts, "bn=256,promote=2,overlap=1,uneven=1"},
                 ++fresh);
  }
}

// Per-token x per-channel scales and FP16 output run every tile's staged epilogue: with and
// without a bias, split or not, in every output type.
TEST_F(Fp8GemmGpu, RowScalesExactEveryStagedTile) {
  for (const char* cfg : {"bn=64", "bn=128", "bn=192", "bn=256", "bn=176", "bn=128,splits=2", "bn=256,splits=3",
                          "bn=64,bm=64", "bn=64,bm=64,splits=3", "bn=112,bm=64", "bn=128,grid=5,group=2",
                          "bn=128,promote=2", "bn=192,promote=2", "bn=256,promote=2", "bn=176,promote=2,splits=2",
                          "bn=64,bm=64,splits=3,grid=3", "bn=64,splits=2,creduce=1",
                          // Overlapped (W1 v20); on a grid of fewer CTAs than units, so the slices'
                          // handshake runs many phases under the next units' MMAs.
                          "bn=256,promote=2,overlap=1", "bn=256,promote=2,overlap=1,grid=3,group=1"})
    for (OutType out : {OutType::kBF16, OutType::kFP32, OutType::kFP16})
      for (bool bias : {false, true}) {
        // Split within a cluster is compiled for BF16 out (the others run through the workspace).
        if (std::string(cfg).find("creduce=1") != std::string::npos && out != OutType::kBF16) continue;
        // Promotion every two K blocks and the overlap are compiled for the staged epilogue in
        // BF16 only.
        if ((std::string(cfg).find("promote=2") != std::string::npos ||
             std::string(cfg).find("overlap=1") != std::string::npos) &&
            out != OutType::kBF16)
          continue;
        Case c{256, 384, 512, out, bias, Inputs::kSmallInts, cfg};
        c.row_scales = true;
        expect_exact(c);
      }
  // FP16 output without scales: the staged kernels with ones and zeros staged.
  expect_exact({256, 384, 512, OutType::kFP16, false, Inputs::kSmallInts, "bn=192"});
}

TEST_F(Fp8GemmGpu, RowScalesEdgeShapesExact) {
  for (int64_t m : {1, 3, 64, 127, 129, 1000})
    for (int64_t n : {16, 208})
      for (int64_t k : {16, 400})
        for (const char* cfg : {static_cast<const char*>(nullptr), "bn=256", "bn=112,bm=64"})
          for (OutType out : {OutType::kBF16, OutType::kFP16}) {
            Case c{m, n, k, out, m % 2 == 1, Inputs::kSmallInts, cfg};
            c.row_scales = true;
            expect_exact(c);
          }
}

// A residual beside per-row scales or FP16 output runs in the staged epilogue (the fused one
// has no room for the per-channel slice): every staged tile, split or not, with and without a
// bias, and edge shapes; in place (residual == D) in BF16.
TEST_F(Fp8GemmGpu, RowScalesWithResidualExact) {
  for (const char* cfg : {"bn=64", "bn=128", "bn=192", "bn=256", "bn=176", "bn=128,splits=2", "bn=256,splits=3",
                          "bn=64,bm=64", "bn=64,bm=64,splits=3", "bn=112,bm=64", "bn=128,grid=5,group=2",
                          "bn=256,promote=2", "bn=176,promote=2,splits=2"})
    for (OutType out : {OutType::kBF16, OutType::kFP32, OutType::kFP16})
      for (bool scales : {false, true}) {
        if (std::string(cfg).find("promote=2") != std::string::npos && out != OutType::kBF16) continue;
        if (!scales && out != OutType::kFP16) continue;  // a residual alone runs the fused epilogue
        Case c{256, 384, 512, out, scales, Inputs::kSmallInts, cfg};
        c.row_scales = scales;
        c.residual = true;
        expect_exact(c);
      }
  for (int64_t m : {1, 3, 127, 129, 1000})
    for (int64_t n : {16, 208})
      for (const char* cfg : {static_cast<const char*>(nullptr), "bn=256", "bn=112,bm=64"}) {
        Case c{m, n, 400, OutType::kBF16, m % 2 == 1, Inputs::kSmallInts, cfg};
        c.row_scales = true;
        c.residual = true;
        expect_exact(c);
      }
  for (const char* cfg : {static_cast<const char*>(nullptr), "bn=128,splits=2", "bn=64,bm=64,splits=3"}) {
    Case c{300, 640, 1024, OutType::kBF16, true, Inputs::kSmallInts, cfg};
    c.row_scales = true;
    c.residual = true;
    c.in_place = true;
    expect_exact(c);
  }
  Case c{200, 1040, 2048, OutType::kBF16, true, Inputs::kUniform, nullptr};
  c.row_scales = true;
  c.residual = true;
  expect_close(c);
  // The chooser picks the overlapped 256-wide tile for this shape, whose staged kernel adds no
  // residual: the call runs the tile without the overlap (W1 v20).
  Case big{1024, 4096, 2048, OutType::kBF16, true, Inputs::kSmallInts, nullptr};
  big.row_scales = true;
  big.residual = true;
  expect_exact(big);
}

TEST_F(Fp8GemmGpu, RowScalesRandomWithinBound) {
  for (int64_t m : {1, 64, 128, 1000})
    for (OutType out : {OutType::kBF16, OutType::kFP16, OutType::kFP32}) {
      Case c{m, 1024, 2048, out, m == 64, Inputs::kUniform, nullptr};
      c.row_scales = true;
      expect_close(c);
    }
}

// Per-row scales and FP16 output run the staged epilogue only: the fused steps, and the
// kernels compiled for the plain epilogue alone (CTA pairs, promotion every two K blocks, the
// overlapped epilogue), refuse them; so do bad scale pointers.
TEST_F(Fp8GemmGpu, RowScalesRejectWhatTheyCannotRun) {
  const int64_t m = 256, n = 256, k = 512;
  Buf A(m * k), B(n * k), D(m * n * 4), res(m * n * 2), rs(m * 4 + 64), cs(n * 4);
  Fp8GemmArgs a;
  a.m = m;
  a.n = n;
  a.k = k;
  a.a = A.p;
  a.b = B.p;
  a.d = D.p;
  a.a_row_scale = static_cast<const float*>(rs.p);
  a.b_row_scale = static_cast<const float*>(cs.p);
  auto refused = [&](const Fp8GemmArgs& x, const char* config, const char* what) {
    Fp8GemmConfig cfg;
    if (config) {
      ASSERT_TRUE(parse_fp8_config(config, &cfg).ok()) << config;
    }
    const Status st = fp8_gemm(x, nullptr, config ? &cfg : nullptr);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << what << ": " << st.to_string();
    EXPECT_EQ(cudaGetLastError(), cudaSuccess) << what;
  };
  Fp8GemmArgs x = a;
  x.row_bcast = res.p;
  x.row_bcast_rows = 8;
  refused(x, nullptr, "row scales with a row broadcast");
  x = a;
  x.activation = Activation::kSilu;
  refused(x, nullptr, "row scales with an activation");
  x = a;
  x.a_row_scale = nullptr;
  x.b_row_scale = nullptr;
  x.out_type = OutType::kFP16;
  x.activation = Activation::kGelu;
  refused(x, nullptr, "FP16 out with an activation");
  refused(a, "bn=128,cluster=2", "CTA pairs");
  x = a;
  x.out_type = OutType::kFP16;
  refused(x, "bn=256,promote=2", "promote=2 with FP16 out");
  refused(x, "bn=256,promote=2,overlap=1", "overlap=1 with FP16 out");
  // The 128-wide overlapped tile has no staged twin (it tied, W1 v20).
  refused(a, "bn=128,overlap=1", "bn=128,overlap=1 with row scales");
  // The overlapped staged kernels add no residual (W1 v20): forced, refused; the chooser's pick
  // runs without the overlap (RowScalesWithResidualExact).
  x = a;
  x.residual = res.p;
  for (const char* cfg : {"bn=256,promote=2,overlap=1", "bn=256,promote=2,overlap=1,uneven=1"}) refused(x, cfg, cfg);
  x = a;
  x.a_row_scale = reinterpret_cast<const float*>(static_cast<const char*>(rs.p) + 2);
  refused(x, nullptr, "misaligned a_row_scale");
  std::vector<float> host(n, 1.0f);
  x = a;
  x.b_row_scale = host.data();
  refused(x, nullptr, "pageable host b_row_scale");
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess) << "the context survives";
}

TEST_F(Fp8GemmGpu, EdgeShapesExact) {
  const int64_t ms[] = {1, 3, 64, 65, 127, 129, 1000};
  const int64_t ns[] = {16, 208};
  const int64_t ks[] = {16, 400};
  for (int64_t m : ms)
    for (int64_t n : ns)
      for (int64_t k : ks)
        for (const char* cfg : {"bn=64", "bn=192,splits=2", "bn=256", "bn=64,bm=64", "bn=112,bm=64"}) {
          if (std::string(cfg).find("splits=2") != std::string::npos && k < 256) continue;
          expect_exact({m, n, k, OutType::kBF16, true, Inputs::kSmallInts, cfg});
        }
  expect_exact({1000, 208, 400, OutType::kFP32, false, Inputs::kSmallInts, nullptr});
}

// CTA pairs sharing B by multicast: odd tile-row counts (a phantom partner below the matrix),
// partial tiles in M, N and K, a grid of one cluster walking every unit, both outputs.
TEST_F(Fp8GemmGpu, ClusterPairsExact) {
  const int64_t ms[] = {65, 129, 300, 1000};
  for (int64_t m : ms)
    for (const char* cfg : {"bn=128,cluster=2", "bn=192,cluster=2", "bn=128,cluster=2,grid=2,group=1",
                            "bn=256,promote=2,cluster=2", "bn=256,promote=2,cluster=2,grid=2,group=1"})
      for (OutType out : {OutType::kBF16, OutType::kFP32}) expect_exact({m, 208, 400, out, false, Inputs::kSmallInts, cfg});
  expect_exact({256, 384, 512, OutType::kBF16, false, Inputs::kSmallInts, "bn=192,cluster=2,grid=4"});
  expect_close({333, 1024, 2048, OutType::kFP32, false, Inputs::kUniform, "bn=128,cluster=2"});
  expect_close({512, 2112, 7168, OutType::kBF16, false, Inputs::kUniform, "bn=192,cluster=2"});
}

TEST_F(Fp8GemmGpu, ClusterPairsRejectWhatTheyDoNotCompile) {
  for (const char* bad : {"bn=128,cluster=2,splits=2", "bn=64,cluster=2", "bn=128,cluster=3", "bn=256,cluster=2",
                          "bn=176,cluster=2", "bn=128,promote=2,cluster=2"})
    EXPECT_EQ(run_forced(bad, 256, false).code(), StatusCode::kInvalidArgument) << bad;
  EXPECT_EQ(run_forced("bn=128,cluster=2", 64, false).code(), StatusCode::kInvalidArgument) << "M <= 64";
  EXPECT_EQ(run_forced("bn=128,cluster=2", 256, true).code(), StatusCode::kInvalidArgument) << "a bias";
}

TEST_F(Fp8GemmGpu, RandomWithinTwiceCublasLtError) {
  expect_close({256, 512, 4096, OutType::kBF16, false, Inputs::kUniform, nullptr});
  expect_close({129, 2112, 7168, OutType::kBF16, true, Inputs::kUniform, nullptr});
  expect_close({333, 1024, 2048, OutType::kFP32, false, Inputs::kUniform, "bn=128"});
  expect_close({128, 1024, 8192, OutType::kBF16, false, Inputs::kUniform, "bn=128,splits=8"});
  expect_close({64, 768, 1536, OutType::kFP32, true, Inputs::kUniform, "bn=64,splits=4"});
  expect_close({300, 1536, 4096, OutType::kFP32, false, Inputs::kUniform, "bn=256"});
  expect_close({129, 2112, 7168, OutType::kBF16, true, Inputs::kUniform, "bn=256"});
  expect_close({128, 4096, 7168, OutType::kBF16, false, Inputs::kUniform, "bn=64,bm=64"});
  expect_close({128, 7168, 2048, OutType::kFP32, true, Inputs::kUniform, "bn=112,bm=64"});
  expect_close({129, 2112, 7168, OutType::kFP32, true, Inputs::kUniform, "bn=64,bm=64,splits=2"});
}

// Promotion every two K blocks: an odd K-block count (the last pair reads a block past K, which
// TMA zero-fills), partial tiles, split K over pairs, both outputs; on random inputs the FP32-out
// error, which this trades, still within twice cuBLASLt's, also at K = 16384.
TEST_F(Fp8GemmGpu, PromoteEveryTwoBlocks) {
  for (int64_t m : {1, 129, 256, 1000})
    for (int64_t k : {16, 384, 512})
      for (const char* cfg :
           {"bn=128,promote=2", "bn=192,promote=2", "bn=256,promote=2", "bn=176,promote=2"})
        for (OutType out : {OutType::kBF16, OutType::kFP32}) expect_exact({m, 208, k, out, false, Inputs::kSmallInts, cfg});
  expect_exact({256, 384, 1280, OutType::kFP32, false, Inputs::kSmallInts, "bn=256,promote=2,splits=3"});
  expect_exact({300, 384, 1280, OutType::kBF16, false, Inputs::kSmallInts, "bn=128,promote=2,splits=2,grid=5"});
  expect_close({333, 1024, 2048, OutType::kFP32, false, Inputs::kUniform, "bn=128,promote=2"});
  expect_close({300, 1536, 4096, OutType::kFP32, false, Inputs::kUniform, "bn=256,promote=2"});
  expect_close({256, 1024, 16384, OutType::kFP32, false, Inputs::kUniform, "bn=256,promote=2"});
  expect_close({129, 2112, 7168, OutType::kBF16, false, Inputs::kUniform, "bn=128,promote=2"});
  expect_close({512, 2112, 7168, OutType::kFP32, false, Inputs::kUniform, "bn=192,promote=2"});
  expect_close({512, 2112, 7168, OutType::kBF16, false, Inputs::kUniform, "bn=176,promote=2"});
  expect_close({300, 1536, 4096, OutType::kFP32, false, Inputs::kUniform, "bn=176,promote=2"});
  expect_close({129, 2112, 7168, OutType::kBF16, true, Inputs::kUniform, "bn=176"});
}

TEST_F(Fp8GemmGpu, PromoteEveryTwoRejectsWhatIsNotCompiled) {
  // 4 K blocks are 2 pairs, so splits=3 is too many.
  for (const char* bad : {"bn=64,promote=2", "bn=128,promote=3", "bn=128,promote=0", "bn=128,promote=2,cluster=2",
                          "bn=256,promote=2,splits=3", "bn=64,bm=64,cluster=2", "bn=64,bm=64,promote=2"})
    EXPECT_EQ(run_forced(bad, 256, false).code(), StatusCode::kInvalidArgument) << bad;
  // With a bias: the staged epilogue promotes every two K blocks in BF16 only (W1 v16).
  EXPECT_EQ(run_forced("bn=128,promote=2", 256, true, OutType::kFP32).code(), StatusCode::kInvalidArgument)
      << "a bias, FP32 out";
  EXPECT_TRUE(run_forced("bn=128,promote=2", 256, true).ok()) << "a bias, BF16 out";
}

// Overlapped epilogues (overlap=1): each unit's first MMA group runs while the previous unit is
// staged and stored. Units of one group (K = 16) and odd K-block counts, many units per CTA
// (grid = 3, 5), a last tile row whose second warpgroup lies wholly below M (M = 129, 150: it
// stores through TMA's clipping), one working warpgroup (M = 1, 48), partial N; every element.
TEST_F(Fp8GemmGpu, OverlappedEpilogueExact) {
  for (int64_t m : {1, 48, 129, 150, 300, 1000})
    for (int64_t k : {16, 400, 1280})
      for (const char* cfg : {"bn=256,promote=2,overlap=1", "bn=128,overlap=1", "bn=256,promote=2,overlap=1,grid=3,group=1",
                              "bn=128,overlap=1,grid=5,group=2"})
        for (OutType out : {OutType::kBF16, OutType::kFP32}) {
          if (out == OutType::kFP32 && std::string(cfg).find("bn=256") != std::string::npos) continue;  // not compiled
          expect_exact({m, 208, k, out, false, Inputs::kSmallInts, cfg});
        }
  // The staged twin (BF16): a bias, per-token x per-channel scales, both; the same edges.
  for (int64_t m : {1, 48, 129, 150, 1000})
    for (int64_t k : {16, 400, 1280})
      for (const char* cfg : {"bn=256,promote=2,overlap=1", "bn=256,promote=2,overlap=1,grid=3,group=1",
                              "bn=256,promote=2,overlap=1,grid=5,group=2"})
        for (int ops = 1; ops <= 3; ++ops) {
          Case c{m, 208, k, OutType::kBF16, (ops & 1) != 0, Inputs::kSmallInts, cfg};
          c.row_scales = (ops & 2) != 0;
          expect_exact(c);
        }
  expect_close({300, 1536, 4096, OutType::kBF16, false, Inputs::kUniform, "bn=256,promote=2,overlap=1"});
  expect_close({512, 2112, 7168, OutType::kBF16, false, Inputs::kUniform, "bn=256,promote=2,overlap=1"});
  expect_close({333, 1024, 2048, OutType::kFP32, false, Inputs::kUniform, "bn=128,overlap=1"});
  {
    Case c{512, 2112, 7168, OutType::kBF16, true, Inputs::kUniform, "bn=256,promote=2,overlap=1"};
    c.row_scales = true;
    expect_close(c);
  }
  // The chooser's own overlapped pick, and FP32 out on a shape where it picks bn=256 (no FP32
  // twin: it runs without the overlap).
  expect_close({1024, 4096, 2048, OutType::kBF16, false, Inputs::kUniform, nullptr});
  expect_close({1024, 4096, 2048, OutType::kFP32, false, Inputs::kUniform, nullptr});
}

TEST_F(Fp8GemmGpu, OverlappedEpilogueRejectsWhatIsNotCompiled) {
  for (const char* bad : {"bn=256,promote=2,overlap=1,splits=2", "bn=192,promote=2,overlap=1", "bn=64,overlap=1",
                          "bn=64,bm=64,overlap=1", "bn=256,overlap=1",
                          "bn=256,promote=2,overlap=1,cluster=2", "bn=176,promote=2,overlap=1",
                          "bn=128,promote=2,overlap=1"})
    EXPECT_EQ(run_forced(bad, 256, false).code(), StatusCode::kInvalidArgument) << bad;
  // A bias runs the overlapped staged 256-wide kernel (BF16 out only); the 128-wide tile has no
  // staged twin (it tied, W1 v20).
  EXPECT_TRUE(run_forced("bn=256,promote=2,overlap=1", 256, true).ok()) << "a bias";
  EXPECT_EQ(run_forced("bn=128,overlap=1", 256, true).code(), StatusCode::kInvalidArgument) << "a bias, bn=128";
  EXPECT_EQ(run_forced("bn=256,promote=2,overlap=1", 256, true, OutType::kFP32).code(), StatusCode::kInvalidArgument)
      << "a bias, FP32 out";
  // The FP32 twin of bn=256 is not compiled (it spilled).
  EXPECT_EQ(run_forced("bn=256,promote=2,overlap=1", 256, false, OutType::kFP32).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(run_forced("bn=128,overlap=1", 256, false, OutType::kFP32).ok());
}

// Uneven columns (uneven=1): rows of 240- and 256-wide tiles that cover N exactly, every element
// checked. All tiles narrow (N = 480, 720: B through the shorter box only), wide
// ones among narrow ones (496, 736, 976, 2000), the run of wide tiles moving from band to band
// (group = 1 or 2 with several tile rows; grids of 3 and 5: many units per CTA, the overlapped
// epilogue between them), a last tile row whose second warpgroup lies below M (M = 129, 300),
// one K block and odd counts; then N = 8192, the layout the chooser picks.
TEST_F(Fp8GemmGpu, UnevenColumnsExact) {
  for (int64_t n : {480, 496, 720, 736, 976, 2000})
    for (int64_t m : {1, 129, 300})
      for (int64_t k : {16, 400})
        for (const char* cfg : {"bn=256,promote=2,overlap=1,uneven=1", "bn=256,promote=2,overlap=1,uneven=1,grid=3,group=1",
                                "bn=256,promote=2,overlap=1,uneven=1,grid=5,group=2"})
          expect_exact({m, n, k, OutType::kBF16, false, Inputs::kSmallInts, cfg});
  expect_exact({1000, 992, 1280, OutType::kBF16, false, Inputs::kSmallInts,
                "bn=256,promote=2,overlap=1,uneven=1,grid=5,group=1"});
  expect_exact({300, 8192, 400, OutType::kBF16, false, Inputs::kSmallInts, "bn=256,promote=2,overlap=1,uneven=1"});
  expect_close({512, 8192, 4096, OutType::kBF16, false, Inputs::kUniform, "bn=256,promote=2,overlap=1,uneven=1"});
  expect_close({1024, 8192, 2048, OutType::kBF16, false, Inputs::kUniform, nullptr});
  // The staged twin (W1 v20): each tile's bias and per-channel slice start where the tile does.
  for (int64_t n : {480, 496, 976, 2000})
    for (int64_t m : {1, 300})
      for (const char* cfg : {"bn=256,promote=2,overlap=1,uneven=1", "bn=256,promote=2,overlap=1,uneven=1,grid=5,group=2"})
        for (int ops = 1; ops <= 3; ++ops) {
          Case c{m, n, 400, OutType::kBF16, (ops & 1) != 0, Inputs::kSmallInts, cfg};
          c.row_scales = (ops & 2) != 0;
          expect_exact(c);
        }
  {
    Case c{512, 8192, 4096, OutType::kBF16, true, Inputs::kUniform, "bn=256,promote=2,overlap=1,uneven=1"};
    c.row_scales = true;
    expect_close(c);
  }
}

TEST_F(Fp8GemmGpu, UnevenColumnsRejectWhatTheyCannotRun) {
  for (const char* bad : {"bn=256,promote=2,uneven=1", "bn=128,overlap=1,uneven=1", "bn=256,overlap=1,uneven=1",
                          "bn=256,promote=2,overlap=1,uneven=1,cluster=2"})
    EXPECT_EQ(run_forced(bad, 256, false).code(), StatusCode::kInvalidArgument) << bad;
  const char* ok = "bn=256,promote=2,overlap=1,uneven=1";
  EXPECT_TRUE(run_forced(ok, 256, true).ok()) << "a bias (the staged twin, W1 v20)";
  EXPECT_EQ(run_forced(ok, 256, false, OutType::kFP32).code(), StatusCode::kInvalidArgument) << "FP32 out";
  EXPECT_EQ(run_forced(ok, 256, true, OutType::kFP32).code(), StatusCode::kInvalidArgument) << "FP32 out, a bias";
  // N = 608 is not a sum of 240s and 256s (2 x 256 < 608 < 3 x 240); N = 240 is narrower than
  // one tile.
  for (int64_t n : {608, 240}) {
    const Status s = run_forced(ok, 256, false, OutType::kBF16, n);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << n;
    EXPECT_NE(s.message().find("uneven"), std::string::npos) << s.message();
  }
  EXPECT_TRUE(run_forced(ok, 256, false).ok());  // N = 256: one wide tile
  EXPECT_TRUE(run_forced(ok, 129, false, OutType::kBF16, 480).ok());
  CUDA_OK(cudaDeviceSynchronize());
}

// Split only the last wave (Fp8GemmConfig::head_cols, docs/perf.md W1 v22): the head's tile
// columns in one launch, the rest split in a second that writes its own columns of D (its B rows,
// bias and per-channel scales offset, D's row pitch the call's). Every element checked, exact on
// small integers: a head of one column and of all but one, a partial last column (N = 1008),
// 64- to 192-wide tiles, both promotions, splits of 2 to 4, small grids (many units a CTA), one
// tile row, and the bias and per-row scales through the staged epilogue; FP32 and FP16 out.
TEST_F(Fp8GemmGpu, SplitTailExact) {
  for (int64_t m : {1, 300})
    for (const char* cfg : {"bn=128,splits=2,head=5", "bn=128,splits=3,head=1", "bn=128,splits=2,head=7",
                            "bn=64,splits=2,head=9", "bn=176,promote=2,splits=2,head=3", "bn=192,splits=4,head=2",
                            "bn=128,splits=2,head=4,grid=3,group=1", "bn=128,promote=2,splits=2,head=6,grid=5"})
      for (int ops = 0; ops <= 3; ++ops) {
        Case c{m, 1008, 400, OutType::kBF16, (ops & 1) != 0, Inputs::kSmallInts, cfg};
        c.row_scales = (ops & 2) != 0;
        expect_exact(c);
      }
  expect_exact({300, 1008, 400, OutType::kFP32, false, Inputs::kSmallInts, "bn=128,splits=2,head=5"});
  expect_exact({300, 1008, 400, OutType::kFP32, true, Inputs::kSmallInts, "bn=128,splits=3,head=2"});
  {
    Case c{300, 1008, 400, OutType::kFP16, true, Inputs::kSmallInts, "bn=128,splits=2,head=5"};
    expect_exact(c);
  }
  expect_exact({1000, 4608, 1280, OutType::kBF16, false, Inputs::kSmallInts, "bn=128,splits=5,head=33"});
  expect_close({1024, 4608, 8192, OutType::kBF16, false, Inputs::kUniform, "bn=128,splits=5,head=33"});
  expect_close({1024, 4608, 8192, OutType::kBF16, false, Inputs::kUniform, nullptr});
  {
    Case c{1024, 4608, 8192, OutType::kBF16, true, Inputs::kUniform, nullptr};
    c.row_scales = true;
    expect_close(c);
  }
}

TEST_F(Fp8GemmGpu, SplitTailRejectsWhatItCannotRun) {
  // N = 256 is two 128-wide tile columns: a head of 2 leaves no tail; no split; the overlapped,
  // uneven and paired kernels; a cluster reduction.
  for (const char* bad : {"bn=128,splits=2,head=2", "bn=128,head=1", "bn=256,promote=2,overlap=1,splits=2,head=1",
                          "bn=128,splits=2,head=1,cluster=2", "bn=64,splits=2,head=1,creduce=1"})
    EXPECT_EQ(run_forced(bad, 256, false).code(), StatusCode::kInvalidArgument) << bad;
  Fp8GemmConfig c;
  EXPECT_EQ(parse_fp8_config("bn=128,splits=2,head=-1", &c).code(), StatusCode::kInvalidArgument);
  // A residual (fused epilogue, or beside per-row scales) takes a column range the head cannot split.
  const Status s = run_forced("bn=64,splits=2,head=2", 256, false, OutType::kBF16, 256, /*with_residual=*/true);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("head"), std::string::npos) << s.message();
  CUDA_OK(cudaDeviceSynchronize());
}

// Stream-K (Fp8GemmConfig::stream_k): the tail's runs cross tile boundaries, so every tile of a
// few-tile shape is summed from pieces of several CTAs. Grids of 3 and 7 CTAs (runs of many K
// blocks, several tiles each), 200 (more CTAs than SMs), and the default, where 4 tiles of 4 K
// blocks leave most CTAs one block or none; M = 1, 129, 300; a bias, per-row scales; sk=2.
TEST_F(Fp8GemmGpu, StreamKExact) {
  for (int64_t m : {1, 129, 300})
    for (const char* cfg : {"bn=128,sk=1", "bn=128,sk=2", "bn=128,sk=1,grid=3", "bn=128,sk=2,grid=3",
                            "bn=128,sk=1,grid=7,group=1", "bn=128,sk=2,grid=200"})
      for (int ops = 0; ops <= 3; ++ops)
        for (int64_t k : {400, 2944}) {
          if (k > 400 && ops != 3) continue;  // long K: runs of many blocks; with every operand
          Case c{m, 1008, k, OutType::kBF16, (ops & 1) != 0, Inputs::kSmallInts, cfg};
          c.row_scales = (ops & 2) != 0;
          expect_exact(c);
        }
  expect_exact({129, 256, 400, OutType::kBF16, false, Inputs::kSmallInts, "bn=128,sk=1"});
  expect_exact({256, 5120, 1664, OutType::kBF16, false, Inputs::kSmallInts, "bn=128,sk=1"});
  {
    Case c{256, 5120, 1664, OutType::kBF16, true, Inputs::kSmallInts, "bn=128,sk=2"};
    c.row_scales = true;
    expect_exact(c);
  }
  expect_close({256, 5120, 13824, OutType::kBF16, false, Inputs::kUniform, "bn=128,sk=1"});
  expect_close({1024, 3584, 2048, OutType::kBF16, false, Inputs::kUniform, "bn=128,sk=2"});
}

// A stream-K tile's pieces are summed in K order by whichever arrives last: the same bits every run.
TEST_F(Fp8GemmGpu, StreamKDeterministic) {
  for (const char* cfg : {"bn=128,sk=1", "bn=128,sk=2,grid=7"}) {
    Case c{300, 2048, 4096, OutType::kBF16, false, Inputs::kUniform, cfg};
    std::vector<uint8_t> first;
    for (int run = 0; run < 3; ++run) {
      Outcome o;
      run_case(c, &o);
      EXPECT_EQ(o.ours.nonfinite, 0) << describe(c) << ": unwritten (poisoned) or non-finite outputs";
      if (run == 0) first = o.raw;
      else EXPECT_EQ(o.raw, first) << describe(c) << ": run " << run << " differs from run 0";
    }
  }
}

TEST_F(Fp8GemmGpu, StreamKRejectsWhatItCannotRun) {
  // Splits, clusters, the overlap, uneven columns and a head deal out K their own way; bn=64 and
  // FP32 out have no stream-K kernel.
  for (const char* bad : {"bn=128,sk=1,splits=2", "bn=128,sk=1,cluster=2", "bn=128,sk=1,overlap=1",
                          "bn=256,promote=2,overlap=1,uneven=1,sk=1", "bn=128,sk=1,splits=2,head=1", "bn=64,sk=1",
                          "bn=128,promote=2,sk=1"})
    EXPECT_EQ(run_forced(bad, 256, false).code(), StatusCode::kInvalidArgument) << bad;
  EXPECT_EQ(run_forced("bn=128,sk=1", 256, false, OutType::kFP32).code(), StatusCode::kInvalidArgument);
  Fp8GemmConfig c;
  EXPECT_EQ(parse_fp8_config("bn=128,sk=3", &c).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(parse_fp8_config("bn=128,sk=-1", &c).code(), StatusCode::kInvalidArgument);
  // The workspace: the tail's partial slots on the config's grid, and too little is refused.
  ASSERT_TRUE(parse_fp8_config("bn=128,sk=2,grid=7", &c).ok());
  // 300 x 1008: 8 columns of 3 tiles, walked by 2 lanes of 3 CTAs (one idles); 6 columns whole (4
  // waves less one), 2 dealt out: 3 rows of 2 + 2 - 1 slots.
  EXPECT_EQ(fp8_gemm_workspace_size(300, 1008, 4096, c), 16384u + 9u * 128 * 128 * 4);
  Buf A(300 * 4096), B(1008 * 4096), D(300 * 1008 * 2), W(16384 + 8 * 128 * 128 * 4);
  Fp8GemmArgs a;
  a.m = 300;
  a.n = 1008;
  a.k = 4096;
  a.a = A.p;
  a.b = B.p;
  a.d = D.p;
  a.workspace = W.p;
  a.workspace_bytes = 16384 + 8 * 128 * 128 * 4;
  EXPECT_EQ(fp8_gemm(a, nullptr, &c).code(), StatusCode::kWorkspaceTooSmall);
  CUDA_OK(cudaDeviceSynchronize());
}

// A forced raster band past kMaxRasterGroup is refused (2^30 + 1 once overflowed the band size
// and left tiles unwritten); the largest one runs, every element checked.
TEST_F(Fp8GemmGpu, ForcedRasterGroupIsBounded) {
  for (const char* bad : {"bn=128,group=64", "bn=128,group=1073741825", "bn=128,group=-1"})
    EXPECT_EQ(run_forced(bad, 256, false).code(), StatusCode::kInvalidArgument) << bad;
  expect_exact({1000, 208, 384, OutType::kBF16, false, Inputs::kSmallInts, "bn=128,group=63"});
  expect_exact({1000, 208, 384, OutType::kBF16, false, Inputs::kSmallInts, "bn=64,group=1,grid=3"});
}

// Split K within a cluster adds the partials in the workspace fix-up's order: both transports give
// the same bits on random inputs (plain and per-row scales, M = 1 ... 200, 2 and 3 splits, a grid of
// fewer clusters than tiles), with no workspace at all in a cluster.
TEST_F(Fp8GemmGpu, ClusterSplitMatchesWorkspaceBitwise) {
  struct S { int64_t m, n, k; const char* tile; int splits; bool rows; };
  const S cases[] = {{1, 4096, 4096, "bm=64,bn=64", 2, false},   {64, 2112, 7168, "bm=64,bn=64", 3, false},
                     {129, 320, 2048, "bm=64,bn=64", 3, true},    {128, 4096, 7168, "bn=64", 2, false},
                     {3, 448, 4096, "bn=64", 2, true},            {200, 448, 1024, "bm=64,bn=64,grid=3", 3, false}};
  for (const auto& t : cases) {
    std::vector<uint8_t> raw[2];
    for (int creduce = 0; creduce < 2; ++creduce) {
      const std::string cfg = std::string(t.tile) + ",splits=" + std::to_string(t.splits) + ",creduce=" +
                              std::to_string(creduce);
      Case c{t.m, t.n, t.k, OutType::kBF16, false, Inputs::kUniform, cfg.c_str()};
      c.row_scales = t.rows;
      Outcome o;
      run_case(c, &o);
      EXPECT_EQ(o.ours.nonfinite, 0) << describe(c) << ": unwritten (poisoned) or non-finite outputs";
      raw[creduce] = o.raw;
    }
    EXPECT_EQ(raw[0], raw[1]) << t.m << "x" << t.n << "x" << t.k << " " << t.tile << " splits=" << t.splits
                              << (t.rows ? " +row scales" : "") << ": the two split-K transports differ";
  }
  // In a cluster needs no workspace.
  Fp8GemmConfig cfg;
  ASSERT_TRUE(parse_fp8_config("bm=64,bn=64,splits=3,creduce=1", &cfg).ok());
  EXPECT_EQ(fp8_gemm_workspace_size(64, 2112, 7168, cfg), 0u);
  Buf A(64 * 7168), B(2112 * 7168), D(64 * 2112 * 2);
  Fp8GemmArgs a;
  a.m = 64;
  a.n = 2112;
  a.k = 7168;
  a.a = A.p;
  a.b = B.p;
  a.d = D.p;
  EXPECT_TRUE(fp8_gemm(a, nullptr, &cfg).ok());
  CUDA_OK(cudaDeviceSynchronize());
}

// Within a cluster where no kernel reduces that way is refused, not run through the workspace.
TEST_F(Fp8GemmGpu, ClusterSplitRejectsWhatIsNotCompiled) {
  for (const char* bad : {"bn=128,splits=2,creduce=1", "bn=64,bm=64,splits=4,creduce=1", "bn=64,splits=3,creduce=1",
                          "bn=64,bm=64,splits=1,creduce=1"}) {
    const Status st = run_forced(bad, 256, false);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << bad << ": " << st.to_string();
    EXPECT_NE(st.message().find("creduce=1 needs"), std::string::npos) << st.to_string();
  }
  EXPECT_EQ(run_forced("bn=64,splits=2,creduce=1", 256, false, OutType::kFP32).code(), StatusCode::kInvalidArgument);
  Fp8GemmConfig cfg;
  EXPECT_FALSE(parse_fp8_config("creduce=2", &cfg).ok());
}

TEST_F(Fp8GemmGpu, SplitKIsDeterministic) {
  Case c{200, 640, 4096, OutType::kFP32, false, Inputs::kUniform, "bn=64,splits=7"};
  Outcome first;
  run_case(c, &first);
  for (int rep = 0; rep < 3; ++rep) {
    Outcome again;
    run_case(c, &again);
    EXPECT_EQ(first.raw, again.raw) << "split-K result changed between identical runs (rep " << rep << ")";
  }
}

// One workspace, zero-filled once, shared by split calls of different tile counts: every call
// must find its tile counters at zero. (They used to sit in front of partials sized per call, so
// a call with more tiles read the previous call's partials as counters.)
TEST_F(Fp8GemmGpu, SplitCallsShareOneWorkspace) {
  const size_t bytes = size_t(64) << 20;
  Buf ws(bytes);
  ASSERT_TRUE(workspace_init(ws.p, bytes, nullptr).ok());
  const Case cases[] = {
      {200, 640, 4096, OutType::kFP32, false, Inputs::kSmallInts, "bn=64,splits=7"},    // 20 tiles
      {600, 2048, 1024, OutType::kBF16, false, Inputs::kSmallInts, "bn=64,splits=2"},   // 160 tiles
      {64, 4096, 2048, OutType::kBF16, false, Inputs::kSmallInts, "bm=64,bn=64,splits=4"},  // 64 tiles
      {1000, 4096, 1024, OutType::kFP32, false, Inputs::kSmallInts, "bn=128,splits=2"},  // 256 tiles
      {200, 640, 4096, OutType::kFP32, false, Inputs::kSmallInts, "bn=64,splits=7"},
  };
  for (Case c : cases) {
    c.workspace = ws.p;
    c.workspace_bytes = bytes;
    expect_exact(c);
  }
  // A split call over more tiles than the counter region holds is refused, not miscounted.
  Fp8GemmConfig cfg;
  ASSERT_TRUE(parse_fp8_config("bm=64,bn=64,splits=2", &cfg).ok());
  Fp8GemmArgs a;
  a.m = 64 * 65;
  a.n = 64 * 64;  // 4160 tiles
  a.k = 256;
  a.a = a.b = a.d = ws.p;
  a.workspace = ws.p;
  a.workspace_bytes = bytes;
  const Status st = fp8_gemm(a, nullptr, &cfg);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
}

TEST_F(Fp8GemmGpu, RejectsBadInputOnDevice) {
  Buf A(256 * 256), B(256 * 256), D(256 * 256 * 2);
  Fp8GemmArgs a;
  a.m = 256;
  a.n = 256;
  a.k = 256;
  a.a = static_cast<char*>(A.p) + 1;
  a.b = B.p;
  a.d = D.p;
  EXPECT_EQ(fp8_gemm(a, nullptr).code(), StatusCode::kInvalidArgument);
  a.a = A.p;
  Fp8GemmConfig cfg;
  ASSERT_TRUE(parse_fp8_config("bn=128,splits=2", &cfg).ok());
  EXPECT_EQ(fp8_gemm(a, nullptr, &cfg).code(), StatusCode::kWorkspaceTooSmall);
  cfg.splits = 3;  // K = 256 has only 2 K blocks
  EXPECT_EQ(fp8_gemm(a, nullptr, &cfg).code(), StatusCode::kInvalidArgument);
  cfg.splits = 1;
  cfg.block_n = 144;
  EXPECT_EQ(fp8_gemm(a, nullptr, &cfg).code(), StatusCode::kInvalidArgument);
  // The tiles without a fused epilogue refuse one when forced (the chooser never picks them).
  a.activation = Activation::kGelu;
  for (const char* wide : {"bn=176", "bn=256", "bn=64,bm=64", "bn=80"}) {
    ASSERT_TRUE(parse_fp8_config(wide, &cfg).ok());
    EXPECT_EQ(fp8_gemm(a, nullptr, &cfg).code(), StatusCode::kInvalidArgument) << wide;
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST_F(Fp8GemmGpu, CapturedGraphReplaysWithNewInputs) {
  const int64_t m = 192, n = 256, k = 512;
  Buf A(m * k), B(n * k), D(m * n * 4);
  cudaStream_t s;
  CUDA_OK(cudaStreamCreate(&s));
  Fp8GemmArgs a;
  a.m = m;
  a.n = n;
  a.k = k;
  a.a = A.p;
  a.b = B.p;
  a.d = D.p;
  a.out_type = OutType::kFP32;
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  ASSERT_TRUE(fp8_gemm(a, s).ok());
  CUDA_OK(cudaStreamEndCapture(s, &g));
  CUDA_OK(cudaGraphInstantiate(&ge, g, 0));
  for (int rep = 0; rep < 2; ++rep) {
    const uint64_t seed = lowbit_test::seed() + 100 + rep;
    ASSERT_EQ(bench::fill_e4m3_int(A.p, m * k, 3, seed, s), cudaSuccess);
    ASSERT_EQ(bench::fill_e4m3_int(B.p, n * k, 3, seed + 1, s), cudaSuccess);
    ASSERT_EQ(bench::fill_u16(D.p, m * n * 2, 0xFFFF, s), cudaSuccess);
    CUDA_OK(cudaGraphLaunch(ge, s));
    CUDA_OK(cudaStreamSynchronize(s));
    std::vector<uint8_t> ha(m * k), hb(n * k);
    std::vector<float> hd(m * n);
    CUDA_OK(cudaMemcpy(ha.data(), A.p, ha.size(), cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(hb.data(), B.p, hb.size(), cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(hd.data(), D.p, hd.size() * 4, cudaMemcpyDeviceToHost));
    int64_t bad = 0;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double r = 0;
        for (int64_t q = 0; q < k; ++q) r += formats::e4m3_to_float(ha[i * k + q]) * formats::e4m3_to_float(hb[j * k + q]);
        if (hd[i * n + j] != static_cast<float>(r)) ++bad;
      }
    EXPECT_EQ(bad, 0) << "replay " << rep;
  }
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  cudaStreamDestroy(s);
}

// Split within a cluster under stream capture (the cluster launch and its first capacity queries
// happen while the stream captures), replayed with new inputs: exact each time.
TEST_F(Fp8GemmGpu, ClusterSplitCapturedGraphReplays) {
  const int64_t m = 64, n = 448, k = 2048;
  Buf A(m * k), B(n * k), D(m * n * 2);
  cudaStream_t s;
  CUDA_OK(cudaStreamCreate(&s));
  Fp8GemmArgs a;
  a.m = m;
  a.n = n;
  a.k = k;
  a.a = A.p;
  a.b = B.p;
  a.d = D.p;
  Fp8GemmConfig cfg;
  ASSERT_TRUE(parse_fp8_config("bm=64,bn=64,splits=3,creduce=1", &cfg).ok());
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  const Status st = fp8_gemm(a, s, &cfg);
  CUDA_OK(cudaStreamEndCapture(s, &g));
  ASSERT_TRUE(st.ok()) << st.to_string();
  CUDA_OK(cudaGraphInstantiate(&ge, g, 0));
  for (int rep = 0; rep < 2; ++rep) {
    const uint64_t seed = lowbit_test::seed() + 300 + rep;
    ASSERT_EQ(bench::fill_e4m3_int(A.p, m * k, 2, seed, s), cudaSuccess);
    ASSERT_EQ(bench::fill_e4m3_int(B.p, n * k, 2, seed + 1, s), cudaSuccess);
    ASSERT_EQ(bench::fill_u16(D.p, m * n, 0xFFFF, s), cudaSuccess);
    CUDA_OK(cudaGraphLaunch(ge, s));
    CUDA_OK(cudaStreamSynchronize(s));
    std::vector<uint8_t> ha(m * k), hb(n * k);
    std::vector<uint16_t> hd(m * n);
    CUDA_OK(cudaMemcpy(ha.data(), A.p, ha.size(), cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(hb.data(), B.p, hb.size(), cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(hd.data(), D.p, hd.size() * 2, cudaMemcpyDeviceToHost));
    int64_t bad = 0;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double r = 0;
        for (int64_t q = 0; q < k; ++q) r += formats::e4m3_to_float(ha[i * k + q]) * formats::e4m3_to_float(hb[j * k + q]);
        const float want = formats::bf16_to_float(formats::float_to_bf16(static_cast<float>(r)));
        if (!(formats::bf16_to_float(hd[i * n + j]) == want)) ++bad;
      }
    EXPECT_EQ(bad, 0) << "replay " << rep;
  }
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  cudaStreamDestroy(s);
}

TEST_F(Fp8GemmGpu, EpilogueOptionsAloneAndCombined) {
  const OutType outs[] = {OutType::kBF16, OutType::kFP32};
  for (OutType out : outs) {
    // Row-broadcast periods that do not divide the 128-row tile (7, 100) and one that does (64).
    for (int64_t P : {7, 64, 100}) expect_exact({259, 208, 384, out, false, Inputs::kSmallInts, "bn=64", P});
    expect_exact({259, 208, 384, out, false, Inputs::kSmallInts, "bn=128", 0, true});
    expect_exact({259, 208, 384, out, true, Inputs::kSmallInts, "bn=192", 7, true});
    expect_exact({259, 400, 384, out, true, Inputs::kSmallInts, "bn=256"});  // staged bias; no fused 256
    expect_exact({200, 256, 512, out, true, Inputs::kSmallInts, "bn=128,splits=2", 13, true});
    // One working consumer warpgroup (M <= 64: the other one's feeder idles), a period of one row,
    // a single row.
    expect_exact({48, 208, 384, out, true, Inputs::kSmallInts, "bn=128", 3, true});
    expect_exact({130, 208, 384, out, true, Inputs::kSmallInts, "bn=192", 1});
    expect_exact({1, 208, 256, out, true, Inputs::kSmallInts, "bn=64,splits=2", 1, true});
    for (Activation act : {Activation::kGelu, Activation::kSilu}) {
      expect_exact({259, 208, 384, out, false, Inputs::kSmallInts, "bn=64", 0, false, act});
      expect_exact({131, 208, 384, out, true, Inputs::kSmallInts, "bn=192", 5, true, act});
    }
  }
}

// Resident row-broadcast rows (variants.h): rows [0, P) of a CTA's columns loaded once, each CTA
// on one N block. Periods below a box, not dividing 8 or the tile, W2's 196 and the largest, 256;
// N = 208: a second N tile with its upper half past N; small grids so each CTA walks many units.
TEST_F(Fp8GemmGpu, ResidentRowBroadcastExact) {
  const OutType outs[] = {OutType::kBF16, OutType::kFP32};
  for (OutType out : outs) {
    for (int64_t P : {1, 7, 13, 196, 256})
      expect_exact({1000, 208, 384, out, true, Inputs::kSmallInts, "bn=128,resident=1", P});
    expect_exact({1000, 208, 384, out, true, Inputs::kSmallInts, "bn=128,resident=1,group=1,grid=4", 100, true});
    expect_exact({1000, 208, 384, out, false, Inputs::kSmallInts, "bn=128,resident=1,grid=2", 196});
    expect_exact({48, 208, 384, out, true, Inputs::kSmallInts, "bn=128,resident=1", 7, true});  // one consumer warpgroup
    for (Activation act : {Activation::kGelu, Activation::kSilu})
      expect_exact({259, 384, 256, out, true, Inputs::kSmallInts, "bn=128,resident=1", 49, true, act});
    // The overlapped twin (bias and row broadcast only): periods that do and do not divide the
    // tile, one group per unit (K = 16), many units per CTA, rows past M in the last tile row
    // (M = 150), one working warpgroup (M = 48), no bias.
    for (int64_t P : {1, 7, 196, 256})
      expect_exact({1000, 208, 384, out, true, Inputs::kSmallInts, "bn=128,resident=1,overlap=1", P});
    expect_exact({150, 208, 16, out, true, Inputs::kSmallInts, "bn=128,resident=1,overlap=1", 13});
    expect_exact({1000, 208, 640, out, true, Inputs::kSmallInts, "bn=128,resident=1,overlap=1,group=1,grid=4", 100});
    expect_exact({48, 208, 384, out, false, Inputs::kSmallInts, "bn=128,resident=1,overlap=1", 7});
  }
  // The chooser takes it for a fused call with a short period once the 128 x 128 tiles fill a
  // wave, and not for a period past 256.
  Fp8GemmConfig c;
  ASSERT_TRUE(choose_fp8_config(128 * 24, 768, 768, &c, Fp8EpilogueKind::kFused, 196).ok());
  EXPECT_TRUE(c.resident_rows) << c.to_string();
  EXPECT_TRUE(c.overlap) << c.to_string();
  EXPECT_EQ(c.raster_group, 1);
  EXPECT_EQ(c.grid % 6, 0) << c.to_string();
  ASSERT_TRUE(choose_fp8_config(128 * 24, 768, 768, &c, Fp8EpilogueKind::kFused, 576).ok());
  EXPECT_FALSE(c.resident_rows) << c.to_string();
  ASSERT_TRUE(choose_fp8_config(128 * 24, 768, 768, &c, Fp8EpilogueKind::kBias, 196).ok());
  EXPECT_FALSE(c.resident_rows) << c.to_string();
  // And the library's own choice runs it: a W2-like shape, every element checked; with a GELU
  // (the same pick, run without the overlap).
  expect_exact({128 * 24 + 5, 768, 128, OutType::kBF16, true, Inputs::kSmallInts, nullptr, 196});
  expect_exact({128 * 24 + 5, 768, 128, OutType::kFP32, true, Inputs::kSmallInts, nullptr, 196, true, Activation::kGelu});
}

TEST_F(Fp8GemmGpu, ResidentRowBroadcastRejectsWhatItCannotRun) {
  Buf A(256 * 256), B(256 * 256), D(256 * 256 * 2), pos(300 * 256 * 2), ws(size_t(16) << 20);
  ASSERT_TRUE(workspace_init(ws.p, size_t(16) << 20, nullptr).ok());
  Fp8GemmArgs a;
  a.workspace = ws.p;  // enough for any split: the refusal must come from the resident checks
  a.workspace_bytes = size_t(16) << 20;
  a.m = 256;
  a.n = 256;
  a.k = 256;
  a.a = A.p;
  a.b = B.p;
  a.d = D.p;
  a.row_bcast = pos.p;
  a.row_bcast_rows = 196;
  auto run = [&](const char* text) {
    Fp8GemmConfig cfg;
    const Status parsed = parse_fp8_config(text, &cfg);
    EXPECT_TRUE(parsed.ok()) << text;
    return fp8_gemm(a, nullptr, &cfg).code();
  };
  EXPECT_EQ(run("bn=128,resident=1"), StatusCode::kOk);
  CUDA_OK(cudaDeviceSynchronize());
  for (const char* bad : {"bn=192,resident=1", "bn=128,resident=1,splits=2", "bn=128,resident=1,group=4",
                          "bn=128,resident=1,grid=3", "bn=128,resident=1,promote=2", "bn=128,overlap=1"})
    EXPECT_EQ(run(bad), StatusCode::kInvalidArgument) << bad;
  // The overlapped twin applies the bias and row broadcast only.
  a.activation = Activation::kSilu;
  EXPECT_EQ(run("bn=128,resident=1,overlap=1"), StatusCode::kInvalidArgument);
  a.activation = Activation::kNone;
  EXPECT_EQ(run("bn=128,resident=1,overlap=1"), StatusCode::kOk);
  CUDA_OK(cudaDeviceSynchronize());
  a.row_bcast_rows = 257;  // past the resident buffer
  EXPECT_EQ(run("bn=128,resident=1"), StatusCode::kInvalidArgument);
  a.row_bcast = nullptr;  // nothing to keep resident
  a.row_bcast_rows = 0;
  a.activation = Activation::kGelu;
  EXPECT_EQ(run("bn=128,resident=1"), StatusCode::kInvalidArgument);
  Fp8GemmConfig cfg;
  EXPECT_EQ(parse_fp8_config("bn=128,resident=2", &cfg).code(), StatusCode::kInvalidArgument);
}

namespace {

// A patch-embedding call over these buffers: [m, k] patches, [n, k] weight, bias[n], pos[P, n], [m, n] out.
PatchEmbedArgs patch_embed_args(int64_t P, int64_t m, int64_t n, int64_t k, const void* patches, const void* weight,
                                const void* bias, const void* pos, void* out) {
  PatchEmbedArgs a;
  a.m = m;
  a.n = n;
  a.k = k;
  a.patches = patches;
  a.weight = weight;
  a.bias = bias;
  a.bias_len = n;
  a.pos = pos;
  a.pos_rows = P;
  a.pos_cols = n;
  a.out = out;
  return a;
}

// patch_embed_fp8 on small integers with power-of-two scales, every element checked exactly
// against the FP64 reference; pos and bias from a row hash, so no two pos rows repeat.
void expect_patch_embed_exact(int64_t P, int64_t m, int64_t n, int64_t k, bool whole_images) {
  SCOPED_TRACE("patch_embed P=" + std::to_string(P) + " M=" + std::to_string(m) + " N=" + std::to_string(n) +
               " K=" + std::to_string(k));
  Buf A(m * k), B(n * k), D(m * n * 2), bias(n * 2), pos(P * n * 2), scales(2 * sizeof(float));
  const uint64_t seed = lowbit_test::seed() + 7 + static_cast<uint64_t>(P * 131 + m);
  ASSERT_EQ(bench::fill_e4m3_int(A.p, m * k, 3, seed, nullptr), cudaSuccess);
  ASSERT_EQ(bench::fill_e4m3_int(B.p, n * k, 3, seed + 1, nullptr), cudaSuccess);
  std::vector<uint16_t> hbias(n), hpos(P * n);
  for (int64_t j = 0; j < n; ++j) hbias[j] = lowbit_test::hashed_int_bf16(0, j, seed + 2, 8);
  for (int64_t i = 0; i < P * n; ++i) hpos[i] = lowbit_test::hashed_int_bf16(i / n, i % n, seed + 3, 32);
  bias.upload(hbias);
  pos.upload(hpos);
  // Power-of-two scales (alpha * 2 * 0.5 = 0.25): exact, and a dropped or misplaced scale shows.
  const std::vector<float> hs = {2.0f, 0.5f};
  scales.upload(hs);
  ASSERT_EQ(bench::fill_u16(D.p, m * n, 0xFFFF, nullptr), cudaSuccess);  // poison: NaN
  PatchEmbedArgs a = patch_embed_args(P, m, n, k, A.p, B.p, bias.p, pos.p, D.p);
  a.whole_images = whole_images;
  a.alpha = 0.25f;
  a.patches_scale = static_cast<const float*>(scales.p);
  a.weight_scale = static_cast<const float*>(scales.p) + 1;
  const Status st = patch_embed_fp8(a, nullptr);
  ASSERT_TRUE(st.ok()) << st.to_string();
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<uint8_t> ha(m * k), hb(n * k);
  std::vector<uint16_t> hd(m * n);
  CUDA_OK(cudaMemcpy(ha.data(), A.p, ha.size(), cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(hb.data(), B.p, hb.size(), cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(hd.data(), D.p, hd.size() * 2, cudaMemcpyDeviceToHost));
  std::vector<float> fa(ha.size()), fb(hb.size());
  for (size_t i = 0; i < ha.size(); ++i) fa[i] = formats::e4m3_to_float(ha[i]);
  for (size_t i = 0; i < hb.size(); ++i) fb[i] = formats::e4m3_to_float(hb[i]);
  int64_t bad = 0;
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < n; ++c) {
      double v = 0;
      for (int64_t q = 0; q < k; ++q) v += static_cast<double>(fa[r * k + q]) * fb[c * k + q];
      v = 0.25 * v + formats::bf16_to_float(hbias[c]) + formats::bf16_to_float(hpos[(r % P) * n + c]);
      if (hd[r * n + c] != formats::float_to_bf16(static_cast<float>(v)) && bad++ < 5)
        ADD_FAILURE() << "element (" << r << ", " << c << ") = " << formats::bf16_to_float(hd[r * n + c])
                      << ", want " << v;
    }
  EXPECT_EQ(bad, 0);
}

}  // namespace

TEST_F(Fp8GemmGpu, PatchEmbedMatchesReference) {
  // M = 3 images of P = 49 patches: 147 rows, neither P nor M a multiple of the tile.
  expect_patch_embed_exact(49, 3 * 49, 192, 256, true);
  // Not whole images (M % P != 0): the last image is cut short.
  expect_patch_embed_exact(49, 150, 192, 256, false);
  // W2's period and width with enough tiles (27 x 6 = 162 >= 132) that the library chooses the
  // resident-rows kernel on its own, as it does for W2.
  Fp8GemmConfig chosen;
  ASSERT_TRUE(choose_fp8_config(17 * 196, 768, 128, &chosen, Fp8EpilogueKind::kFused, 196).ok());
  EXPECT_TRUE(chosen.resident_rows) << chosen.to_string();
  expect_patch_embed_exact(196, 17 * 196, 768, 128, true);

  // Misaligned pos is caught on the device path too; M % P != 0 with whole images is refused.
  Buf A(147 * 256), B(192 * 256), D(147 * 192 * 2), bias(192 * 2), pos(49 * 192 * 2);
  PatchEmbedArgs a = patch_embed_args(49, 147, 192, 256, A.p, B.p, bias.p, static_cast<char*>(pos.p) + 2, D.p);
  EXPECT_EQ(patch_embed_fp8(a, nullptr).code(), StatusCode::kInvalidArgument);
  a.pos = pos.p;
  a.m = 150;
  EXPECT_EQ(patch_embed_fp8(a, nullptr).code(), StatusCode::kInvalidArgument);
}
