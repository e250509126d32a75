// Block-scaled FP8 (1x128 A scales, 128x128 B scales): our grouped GEMM (one persistent launch
// after a preparation launch) against, in the same process on the same inputs, cuBLASLt's
// block-scaled FP8 GEMM launched once per group and our dense block-scaled GEMM launched once
// per group. G = 1 shapes time the dense kernel against cuBLASLt alone.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "bench.h"
#include "bench_util.h"
#include "cublaslt_blockscaled.h"
#include "device_fill.h"
#include "formats/e4m3.h"
#include "lowbit/blockscaled.h"
#include "lowbit/device.h"
#include "reference/reference_gemm.h"
#include "timing.h"

namespace lowbit::bench {
namespace {

// One group's operands: views into its input set's slabs.
struct GroupData {
  int64_t m = 0;
  int64_t sfa_ld = 0;
  void* a = nullptr;
  void* d = nullptr;
  float* sfa = nullptr;
  DeviceBuffer d_base;  // the baselines' output
};

// One input set: every group's A and scales, the shared-shape B (one weight matrix per group).
// Group g's A, D and A scales lie at g times a stride of max_m rows in one slab each, and its B
// and B scales at g times theirs: the descriptor call points into the slabs, and the masked call
// (timed beside it where the groups fit, with masked_m = each group's m) reads them as its layout.
struct InputSet {
  std::vector<GroupData> g;
  std::vector<void*> b, sfb;
  DeviceBuffer a_slab, d_slab, sfa_slab, b_slab, sfb_slab, counts;
  // Groups of one size only: the A scales again as the contiguous layout's [kblocks, G * max_m]
  // (the slabs' A and D already are its rows), and its offsets g * max_m.
  DeviceBuffer sfa_rows, offsets;
  DeviceBuffer problems;  // device descriptors of the grouped call
};

}  // namespace

Status run_blockscaled_shape(const Options& opt, const Shape& sh, Result* r) {
  r->shape = sh;
  DeviceInfo dev;
  LOWBIT_RETURN_IF_ERROR(query_device(&dev));
  const std::vector<int64_t> ms = sh.group_m.empty() ? std::vector<int64_t>{sh.m} : sh.group_m;
  const int G = static_cast<int>(ms.size());
  const bool grouped = !sh.group_m.empty();
  const int64_t n = sh.n, k = sh.k, kblocks = (k + 127) / 128, nblocks = (n + 127) / 128;
  const OutType out = opt.out;
  const size_t ob = out == OutType::kFP32 ? 4 : 2;
  int64_t total_m = 0;
  for (int64_t m : ms) total_m += m;
  // Ours and cuBLASLt read the same operands.
  const int sets = rotation_sets(dev.l2_bytes, static_cast<size_t>(total_m * k + G * n * k), 8);

  OwnedStream stream;
  LOWBIT_RETURN_IF_ERROR(stream.create());
  cudaStream_t s = stream.s;
  const uint64_t seed = opt.seed * 1000 + 555;
  std::vector<InputSet> in(sets);
  const int64_t max_m = (*std::max_element(ms.begin(), ms.end()) + 3) / 4 * 4;
  // The contiguous layout is timed where every group has max_m rows: then the slabs are its rows.
  const bool contiguous = grouped && std::all_of(ms.begin(), ms.end(), [&](int64_t m) { return m == max_m; });
  for (int i = 0; i < sets; ++i) {
    InputSet& set = in[i];
    set.g.resize(G);
    set.b.resize(G);
    set.sfb.resize(G);
    LOWBIT_RETURN_IF_ERROR(set.a_slab.alloc(static_cast<size_t>(G * max_m * k)));
    LOWBIT_RETURN_IF_ERROR(set.d_slab.alloc(static_cast<size_t>(G * max_m * n) * ob));
    LOWBIT_RETURN_IF_ERROR(set.sfa_slab.alloc(static_cast<size_t>(G * kblocks * max_m) * 4));
    LOWBIT_RETURN_IF_ERROR(set.b_slab.alloc(static_cast<size_t>(G * n * k)));
    LOWBIT_RETURN_IF_ERROR(set.sfb_slab.alloc(static_cast<size_t>(G * nblocks * kblocks) * 4));
    std::vector<Fp8GroupedProblem> desc(G);
    std::vector<int> counts(G);
    for (int g = 0; g < G; ++g) {
      GroupData& gd = set.g[g];
      gd.m = ms[g];
      gd.sfa_ld = max_m;
      counts[g] = static_cast<int>(gd.m);
      const uint64_t sd = seed + 100 * i + 10 * g;
      gd.a = static_cast<uint8_t*>(set.a_slab.p) + g * max_m * k;
      gd.d = static_cast<uint8_t*>(set.d_slab.p) + g * max_m * n * static_cast<int64_t>(ob);
      gd.sfa = static_cast<float*>(set.sfa_slab.p) + g * kblocks * max_m;
      set.b[g] = static_cast<uint8_t*>(set.b_slab.p) + g * n * k;
      set.sfb[g] = static_cast<float*>(set.sfb_slab.p) + g * nblocks * kblocks;
      LOWBIT_RETURN_IF_ERROR(gd.d_base.alloc(static_cast<size_t>(gd.m * n) * ob));
      // Values over E4M3's whole range, scales like a quantizer's amax / 448.
      LOWBIT_RETURN_IF_ERROR(cuda_status(fill_e4m3_uniform(gd.a, gd.m * k, 448.0f, sd, s), "fill A"));
      LOWBIT_RETURN_IF_ERROR(cuda_status(fill_e4m3_uniform(set.b[g], n * k, 448.0f, sd + 1, s), "fill B"));
      LOWBIT_RETURN_IF_ERROR(cuda_status(
          fill_f32_scales(static_cast<float*>(gd.sfa), kblocks * gd.sfa_ld, -12, -6, false, sd + 2, s), "fill sfa"));
      LOWBIT_RETURN_IF_ERROR(cuda_status(
          fill_f32_scales(static_cast<float*>(set.sfb[g]), nblocks * kblocks, -12, -6, false, sd + 3, s), "fill sfb"));
      desc[g] = Fp8GroupedProblem{static_cast<int32_t>(gd.m), static_cast<int32_t>(n), static_cast<int32_t>(k), 0,
                                  gd.a, set.b[g], gd.d, static_cast<const float*>(gd.sfa),
                                  static_cast<const float*>(set.sfb[g]), gd.sfa_ld};
    }
    LOWBIT_RETURN_IF_ERROR(set.problems.alloc(sizeof(Fp8GroupedProblem) * G));
    LOWBIT_RETURN_IF_ERROR(cuda_status(
        cudaMemcpyAsync(set.problems.p, desc.data(), sizeof(Fp8GroupedProblem) * G, cudaMemcpyHostToDevice, s),
        "descriptors"));
    LOWBIT_RETURN_IF_ERROR(set.counts.alloc(sizeof(int) * G));
    LOWBIT_RETURN_IF_ERROR(
        cuda_status(cudaMemcpyAsync(set.counts.p, counts.data(), sizeof(int) * G, cudaMemcpyHostToDevice, s), "counts"));
    std::vector<int> offsets(G + 1);
    if (contiguous) {
      for (int g = 0; g <= G; ++g) offsets[g] = static_cast<int>(g * max_m);
      LOWBIT_RETURN_IF_ERROR(set.sfa_rows.alloc(static_cast<size_t>(kblocks * G * max_m) * 4));
      LOWBIT_RETURN_IF_ERROR(set.offsets.alloc(sizeof(int) * (G + 1)));
      for (int g = 0; g < G; ++g)
        LOWBIT_RETURN_IF_ERROR(cuda_status(
            cudaMemcpy2DAsync(static_cast<float*>(set.sfa_rows.p) + g * max_m, G * max_m * 4, set.g[g].sfa, max_m * 4,
                              max_m * 4, kblocks, cudaMemcpyDeviceToDevice, s),
            "contiguous A scales"));
      LOWBIT_RETURN_IF_ERROR(cuda_status(
          cudaMemcpyAsync(set.offsets.p, offsets.data(), sizeof(int) * (G + 1), cudaMemcpyHostToDevice, s), "offsets"));
    }
    LOWBIT_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(s), "setup"));  // host temporaries
  }
  BlockScaledConfig cfg;
  if (!opt.config.empty()) LOWBIT_RETURN_IF_ERROR(parse_blockscaled_config(opt.config, &cfg));
  r->config = grouped ? cfg.to_string() : explain_blockscaled_choice(cfg, false, ms[0], n, dev.sm_count, k);
  std::printf("  %s: %s\n", grouped ? "grouped" : "dense",
              explain_blockscaled_choice(cfg, grouped, ms[0], n, dev.sm_count, k).c_str());
  // --alt configs: timed alongside, interleaved, on the same inputs.
  std::vector<BlockScaledConfig> alts(opt.alt_configs.size());
  for (size_t c = 0; c < alts.size(); ++c)
    LOWBIT_RETURN_IF_ERROR(parse_blockscaled_config(opt.alt_configs[c], &alts[c]));
  // Grouped: the per-group maps and status; dense: split-K scratch for the chooser's pick, or the
  // forced config's, and each --alt's (zero-filled once, as the API asks).
  size_t ws_bytes = std::max({fp8_grouped_workspace_size(G), fp8_grouped_masked_workspace_size(G),
                              fp8_grouped_contiguous_workspace_size(G)});
  if (!grouped) {
    ws_bytes = fp8_blockscaled_workspace_size(ms[0], n, k, opt.config.empty() ? nullptr : &cfg);
    for (const auto& a : alts) ws_bytes = std::max(ws_bytes, fp8_blockscaled_workspace_size(ms[0], n, k, &a));
  }
  DeviceBuffer ws;
  LOWBIT_RETURN_IF_ERROR(ws.alloc(ws_bytes));
  if (!grouped) LOWBIT_RETURN_IF_ERROR(workspace_init(ws.p, ws_bytes, s));

  auto dense_args = [&](const InputSet& set, int g, bool base_out) {
    const GroupData& gd = set.g[g];
    Fp8BlockScaledArgs a;
    a.m = gd.m;
    a.n = n;
    a.k = k;
    a.a = gd.a;
    a.b = set.b[g];
    a.d = base_out ? gd.d_base.p : gd.d;
    a.sfa = static_cast<const float*>(gd.sfa);
    a.sfa_ld = gd.sfa_ld;
    a.sfb = static_cast<const float*>(set.sfb[g]);
    a.out_type = out;
    if (!grouped) {
      a.workspace = ws.p;
      a.workspace_bytes = ws_bytes;
    }
    return a;
  };
  // Without --config the calls choose (dense: the core's chooser, memoized).
  const BlockScaledConfig* forced = opt.config.empty() ? nullptr : &cfg;
  auto run_config = [&](const BlockScaledConfig* c, cudaStream_t st, int i) {
    const InputSet& set = in[i % sets];
    if (!grouped) return fp8_blockscaled_gemm(dense_args(set, 0, false), st, c);
    return fp8_grouped_gemm(static_cast<const Fp8GroupedProblem*>(set.problems.p), G, out, ws.p, ws_bytes, st, c);
  };
  auto ours = [&](cudaStream_t st, int i) { return run_config(forced, st, i); };
  // The masked layout over the same slabs (DeepGEMM's m_grouped_fp8_gemm_nt_masked).
  auto ours_masked = [&](cudaStream_t st, int i) {
    const InputSet& set = in[i % sets];
    Fp8MaskedGroupedArgs x;
    x.groups = G;
    x.max_m = static_cast<int>(max_m);
    x.n = n;
    x.k = k;
    x.a = set.a_slab.p;
    x.b = set.b_slab.p;
    x.d = set.d_slab.p;
    x.sfa = static_cast<const float*>(set.sfa_slab.p);
    x.sfa_ld = max_m;
    x.sfb = static_cast<const float*>(set.sfb_slab.p);
    x.masked_m = static_cast<const int*>(set.counts.p);
    x.out_type = out;
    x.workspace = ws.p;
    x.workspace_bytes = ws_bytes;
    return fp8_grouped_gemm_masked(x, st, forced);
  };
  // The contiguous layout over the same rows (DeepGEMM's m_grouped_fp8_gemm_nt_contiguous).
  auto ours_contiguous = [&](cudaStream_t st, int i) {
    const InputSet& set = in[i % sets];
    Fp8ContiguousGroupedArgs x;
    x.groups = G;
    x.rows = G * max_m;
    x.n = n;
    x.k = k;
    x.a = set.a_slab.p;
    x.b = set.b_slab.p;
    x.d = set.d_slab.p;
    x.sfa = static_cast<const float*>(set.sfa_rows.p);
    x.sfa_ld = G * max_m;
    x.sfb = static_cast<const float*>(set.sfb_slab.p);
    x.offsets = static_cast<const int*>(set.offsets.p);
    x.out_type = out;
    x.workspace = ws.p;
    x.workspace_bytes = ws_bytes;
    return fp8_grouped_gemm_contiguous(x, st, forced);
  };
  auto ours_loop = [&](cudaStream_t st, int i) {
    const InputSet& set = in[i % sets];
    for (int g = 0; g < G; ++g)
      if (set.g[g].m > 0) LOWBIT_RETURN_IF_ERROR(fp8_blockscaled_gemm(dense_args(set, g, true), st, nullptr));
    return Status::Ok();
  };

  // Correctness on set 0: the FP64 reference at sampled elements of every group, computed once;
  // then every launcher that is timed (ours, the per-group loop of our dense kernel, each --alt)
  // is checked against it: poisoned outputs, every element written, the similarity bound.
  struct Sample {
    int g;
    int64_t index;  // row * n + col in group g's output
  };
  std::vector<Sample> sampled;
  std::vector<double> ref;
  {
    std::mt19937_64 rng(seed ^ 0xB10C);
    std::vector<uint8_t> hb(static_cast<size_t>(n * k));
    std::vector<float> fb(hb.size()), hsfb(static_cast<size_t>(nblocks * kblocks));
    for (int g = 0; g < G; ++g) {
      const GroupData& gd = in[0].g[g];
      if (gd.m == 0) continue;
      std::vector<uint8_t> ha(static_cast<size_t>(gd.m * k));
      std::vector<float> fa(ha.size()), hsfa(static_cast<size_t>(kblocks * gd.sfa_ld));
      cudaMemcpy(ha.data(), gd.a, ha.size(), cudaMemcpyDeviceToHost);
      cudaMemcpy(hb.data(), in[0].b[g], hb.size(), cudaMemcpyDeviceToHost);
      cudaMemcpy(hsfa.data(), gd.sfa, hsfa.size() * 4, cudaMemcpyDeviceToHost);
      cudaMemcpy(hsfb.data(), in[0].sfb[g], hsfb.size() * 4, cudaMemcpyDeviceToHost);
      LOWBIT_RETURN_IF_ERROR(cuda_status(cudaGetLastError(), "copy back"));
      for (size_t e = 0; e < ha.size(); ++e) fa[e] = formats::e4m3_to_float(ha[e]);
      for (size_t e = 0; e < hb.size(); ++e) fb[e] = formats::e4m3_to_float(hb[e]);
      reference::BlockScaledProblem p;
      p.m = gd.m;
      p.n = n;
      p.k = k;
      p.a = fa.data();
      p.b = fb.data();
      p.sfa = hsfa.data();
      p.sfa_ld = gd.sfa_ld;
      p.sfb = hsfb.data();
      for (int t = 0; t < 256; ++t) {
        const int64_t row = static_cast<int64_t>(rng() % gd.m), col = static_cast<int64_t>(rng() % n);
        ref.push_back(reference::blockscaled_element(p, row, col));
        sampled.push_back({g, row * n + col});
      }
    }
  }
  // `base_out`: the launcher writes the groups' d_base (the per-group loop) instead of d.
  auto check = [&](const LaunchFn& launch, bool base_out, const std::string& what) -> Status {
    for (int g = 0; g < G; ++g) {
      const GroupData& gd = in[0].g[g];
      LOWBIT_RETURN_IF_ERROR(
          cuda_status(fill_u16(base_out ? gd.d_base.p : gd.d, ms[g] * n * ob / 2, 0xFFFF, s), "poison"));
    }
    LOWBIT_RETURN_IF_ERROR(launch(s, 0));
    if (grouped && !base_out) LOWBIT_RETURN_IF_ERROR(fp8_grouped_check_status(ws.p, s));
    LOWBIT_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(s), "run"));
    // One group's output on the host at a time (the samples are in group order).
    int64_t unwritten = 0;
    std::vector<double> got;
    std::vector<uint8_t> hd;
    size_t next = 0;
    for (int g = 0; g < G; ++g) {
      const GroupData& gd = in[0].g[g];
      if (gd.m == 0) continue;
      hd.resize(static_cast<size_t>(gd.m * n) * ob);
      LOWBIT_RETURN_IF_ERROR(cuda_status(
          cudaMemcpy(hd.data(), base_out ? gd.d_base.p : gd.d, hd.size(), cudaMemcpyDeviceToHost), "copy D"));
      for (size_t e = 0; e < static_cast<size_t>(gd.m * n); ++e)
        if (!std::isfinite(read_output(hd, out, e))) ++unwritten;
      for (; next < sampled.size() && sampled[next].g == g; ++next)
        got.push_back(read_output(hd, out, static_cast<size_t>(sampled[next].index)));
    }
    const auto e = reference::compare(ref, got);
    const double similarity = reference::similarity_diff(ref, got);
    if (what.empty()) {
      r->err = e.rel_fro;
      r->max_err = e.max_rel;
      r->similarity = similarity;
    }
    if (!r->status.empty()) return Status::Ok();  // a row already failed keeps its first reason
    const std::string who = what.empty() ? "" : what + ": ";
    if (unwritten > 0) r->status = "FAIL: " + who + std::to_string(unwritten) + " outputs not written";
    else if (e.nonfinite > 0) r->status = "FAIL: " + who + "non-finite outputs";
    else if (similarity > 1e-3) r->status = "FAIL: " + who + "similarity diff " + std::to_string(similarity);
    return Status::Ok();
  };
  LOWBIT_RETURN_IF_ERROR(check(ours, false, ""));
  if (grouped && opt.baseline) LOWBIT_RETURN_IF_ERROR(check(ours_loop, true, "per-group loop"));
  if (grouped) LOWBIT_RETURN_IF_ERROR(check(ours_masked, false, "masked layout"));
  if (contiguous) LOWBIT_RETURN_IF_ERROR(check(ours_contiguous, false, "contiguous layout"));
  for (size_t c = 0; c < alts.size(); ++c)
    LOWBIT_RETURN_IF_ERROR(check([&, c](cudaStream_t st, int i) { return run_config(&alts[c], st, i); }, false,
                                 "alt " + alts[c].to_string()));

  // cuBLASLt block-scaled, once per group, with scales converted to its layout at setup.
  std::vector<std::vector<CublasLtFp8BlockScaled>> lt(sets);
  bool lt_ok = opt.baseline;
  std::string lt_err;
  for (int i = 0; i < sets && lt_ok; ++i) {
    lt[i] = std::vector<CublasLtFp8BlockScaled>(G);
    for (int g = 0; g < G && lt_ok; ++g) {
      const GroupData& gd = in[i].g[g];
      Status st = lt[i][g].plan(gd.m, n, k, out);
      if (st.ok())
        st = lt[i][g].convert_scales(static_cast<const float*>(gd.sfa), gd.sfa_ld,
                                     static_cast<const float*>(in[i].sfb[g]), s);
      if (!st.ok()) {
        lt_ok = false;
        lt_err = st.to_string();
      }
    }
  }
  if (!lt_ok && opt.baseline) std::printf("  cuBLASLt block-scaled baseline unavailable: %s\n", lt_err.c_str());
  auto base = [&](cudaStream_t st, int i) {
    const InputSet& set = in[i % sets];
    for (int g = 0; g < G; ++g)
      LOWBIT_RETURN_IF_ERROR(lt[i % sets][g].run(set.g[g].a, set.b[g], set.g[g].d_base.p, st));
    return Status::Ok();
  };

  double rough = 0.0;
  LOWBIT_RETURN_IF_ERROR(rough_time_us(ours, s, &rough));
  const int batch = std::clamp(static_cast<int>(3000.0 / std::max(rough, 1.0)), 2, 200);
  std::vector<LaunchFn> launches = {ours};
  int i_lt = -1, i_loop = -1;
  if (lt_ok) { i_lt = static_cast<int>(launches.size()); launches.push_back(base); }
  if (grouped && opt.baseline) { i_loop = static_cast<int>(launches.size()); launches.push_back(ours_loop); }
  int i_masked = -1;
  if (grouped) { i_masked = static_cast<int>(launches.size()); launches.push_back(ours_masked); }
  int i_contiguous = -1;
  if (contiguous) { i_contiguous = static_cast<int>(launches.size()); launches.push_back(ours_contiguous); }
  const size_t i_alt = launches.size();
  for (size_t c = 0; c < alts.size(); ++c)
    launches.push_back([&, c](cudaStream_t st, int i) { return run_config(&alts[c], st, i); });
  std::vector<Timing> t;
  LOWBIT_RETURN_IF_ERROR(time_graphs_interleaved(launches, s, batch, opt.samples, &t));
  if (i_masked >= 0)
    std::printf("  masked layout (masked_m = the group sizes): %9.1f us  (%.3f x the descriptor call)\n",
                t[i_masked].median_us, t[0].median_us / t[i_masked].median_us);
  if (i_contiguous >= 0)
    std::printf("  contiguous layout (offsets g * %lld):      %9.1f us  (%.3f x the descriptor call)\n",
                static_cast<long long>(max_m), t[i_contiguous].median_us, t[0].median_us / t[i_contiguous].median_us);
  for (size_t c = 0; c < alts.size(); ++c) {
    const double us = t[i_alt + c].median_us;
    std::printf("  alt %-44s %9.2f us  (%.3f x the reported config%s)\n", alts[c].to_string().c_str(), us,
                t[0].median_us / us, i_lt >= 0 ? (", " + std::to_string(t[i_lt].median_us / us) + " x cuBLASLt").c_str() : "");
  }

  const double flops = 2.0 * total_m * n * k;
  const double bytes = static_cast<double>(total_m * k + G * n * k) + static_cast<double>(total_m * n) * ob;
  r->us = t[0].median_us;
  r->us_base = i_lt >= 0 ? t[i_lt].median_us : 0.0;
  r->us_loop = i_loop >= 0 ? t[i_loop].median_us : 0.0;
  r->us_masked = i_masked >= 0 ? t[i_masked].median_us : 0.0;
  r->us_contiguous = i_contiguous >= 0 ? t[i_contiguous].median_us : 0.0;
  r->tflops = flops / (r->us * 1e6);
  r->gbs = bytes / (r->us * 1e3);
  r->floor_us = std::max(flops / (kPeakFp8Tflops * 1e6), bytes / (kCopyTBs * 1e6));
  r->pct_floor = 100.0 * r->floor_us / r->us;
  r->speedup = r->us_base > 0 ? r->us_base / r->us : 0.0;
  r->x_loop = r->us_loop > 0 ? r->us_loop / r->us : 0.0;
  r->batch = batch;
  r->samples = opt.samples;
  if (r->status.empty()) r->status = "ok";
  return Status::Ok();
}

}  // namespace lowbit::bench
