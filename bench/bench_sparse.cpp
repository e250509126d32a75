// W3: 2:4-sparse GEMM (E4M3 or F16) against dense cuBLASLt on the same (2:4) inputs, same process,
// and, for E4M3, against our own dense FP8 GEMM.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "bench.h"
#include "bench_util.h"
#include "cublaslt_fp8.h"
#include "cusparselt_baseline.h"
#include "device_fill.h"
#include "formats/e4m3.h"
#include "formats/fp16.h"
#include "lowbit/device.h"
#include "lowbit/gemm.h"
#include "lowbit/sparse.h"
#include "reference/reference_gemm.h"
#include "timing.h"

namespace lowbit::bench {

Status run_sparse_shape(const Options& opt, const Shape& sh, Result* r) {
  r->shape = sh;
  DeviceInfo dev;
  LOWBIT_RETURN_IF_ERROR(query_device(&dev));
  const bool fp8 = sh.suite != "W3-f16" && opt.sparse != "f16";
  const SparseType type = fp8 ? SparseType::kE4M3 : SparseType::kF16;
  const int eb = fp8 ? 1 : 2;
  const int64_t m = sh.m, n = sh.n, k = sh.k;
  // Sets rotate until two L2s' worth of operands pass between reuses, counted for the smallest
  // reader: ours and cuSPARSELt read the compressed half of A and its metadata (the dense
  // baselines all of A).
  const size_t footprint = static_cast<size_t>(m * k / 2 * eb + m * k / 8 + n * k * eb);
  const int sets = rotation_sets(dev.l2_bytes, footprint);

  OwnedStream stream;
  LOWBIT_RETURN_IF_ERROR(stream.create());
  cudaStream_t s = stream.s;
  std::vector<DeviceBuffer> A(sets), B(sets), V(sets), Mt(sets);
  DeviceBuffer D, Dbase, Dbase_fast, Ddense, scales, ws, wsd, viol;
  LOWBIT_RETURN_IF_ERROR(viol.alloc(8));
  const uint64_t seed = opt.seed;
  for (int i = 0; i < sets; ++i) {
    LOWBIT_RETURN_IF_ERROR(A[i].alloc(static_cast<size_t>(m * k * eb)));
    LOWBIT_RETURN_IF_ERROR(B[i].alloc(static_cast<size_t>(n * k * eb)));
    LOWBIT_RETURN_IF_ERROR(V[i].alloc(static_cast<size_t>(m * k / 2 * eb)));
    LOWBIT_RETURN_IF_ERROR(Mt[i].alloc(sparse24_meta_bytes(m, k, type)));
    const uint64_t sa = seed * 1000 + 2 * i, sb = sa + 1;
    if (fp8) {
      LOWBIT_RETURN_IF_ERROR(cuda_status(fill_e4m3_uniform(A[i].p, m * k, 4.0f, sa, s), "fill A"));
      LOWBIT_RETURN_IF_ERROR(cuda_status(fill_e4m3_uniform(B[i].p, n * k, 4.0f, sb, s), "fill B"));
    } else {
      LOWBIT_RETURN_IF_ERROR(cuda_status(fill_f16_uniform(A[i].p, m * k, 1.0f, sa, s), "fill A"));
      LOWBIT_RETURN_IF_ERROR(cuda_status(fill_f16_uniform(B[i].p, n * k, 1.0f, sb, s), "fill B"));
    }
    LOWBIT_RETURN_IF_ERROR(cuda_status(mask_2_4(A[i].p, m * k, eb, sa ^ 0x24, s), "mask A"));
    // The checked compression synchronizes: setup, never timed.
    LOWBIT_RETURN_IF_ERROR(
        sparse24_compress_checked(A[i].p, m, k, type, V[i].p, Mt[i].p, static_cast<int64_t*>(viol.p), s));
  }
  LOWBIT_RETURN_IF_ERROR(D.alloc(static_cast<size_t>(m * n) * 2));
  LOWBIT_RETURN_IF_ERROR(Dbase.alloc(static_cast<size_t>(m * n) * 2));
  LOWBIT_RETURN_IF_ERROR(Dbase_fast.alloc(static_cast<size_t>(m * n) * 2));
  LOWBIT_RETURN_IF_ERROR(Ddense.alloc(static_cast<size_t>(m * n) * 2));
  LOWBIT_RETURN_IF_ERROR(scales.alloc(512));
  const float h_scales[2] = {fp8 ? 0.0625f : 1.0f, fp8 ? 0.03125f : 1.0f};
  float* d_sa = static_cast<float*>(scales.p);
  float* d_sb = d_sa + 64;
  LOWBIT_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(d_sa, &h_scales[0], 4, cudaMemcpyHostToDevice, s), "scales"));
  LOWBIT_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(d_sb, &h_scales[1], 4, cudaMemcpyHostToDevice, s), "scales"));

  // cfgs[0] is the one reported; the --alt configs are timed alongside it, interleaved.
  std::vector<Sparse24GemmConfig> cfgs;
  LOWBIT_RETURN_IF_ERROR(config_list(
      opt, parse_sparse24_config,
      [&](Sparse24GemmConfig* c) { return choose_sparse24_config(m, n, k, type, c, opt.fast_accum); }, &cfgs));
  size_t ws_bytes = 0;
  for (const auto& c : cfgs) ws_bytes = std::max(ws_bytes, sparse24_gemm_workspace_size(m, n, k, type, c));
  const Sparse24GemmConfig& cfg = cfgs[0];
  r->config = cfg.to_string();
  // E4M3 also with fast accumulation (cuSPARSELt's arithmetic): the chooser's pick for it, or
  // the forced config.
  Sparse24GemmConfig cfg_fast = cfg;
  if (fp8 && opt.config.empty()) LOWBIT_RETURN_IF_ERROR(choose_sparse24_config(m, n, k, type, &cfg_fast, true));
  if (fp8) {
    r->config_fast = cfg_fast.to_string();
    ws_bytes = std::max(ws_bytes, sparse24_gemm_workspace_size(m, n, k, type, cfg_fast));
  }
  auto run_config = [&](const Sparse24GemmConfig& c, cudaStream_t st, int i, bool fast_accum) {
    Sparse24GemmArgs a;
    a.m = m;
    a.n = n;
    a.k = k;
    a.type = type;
    a.a_values = V[i % sets].p;
    a.a_meta = Mt[i % sets].p;
    a.b = B[i % sets].p;
    a.d = D.p;
    a.a_scale = d_sa;
    a.b_scale = d_sb;
    a.workspace = ws.p;
    a.workspace_bytes = ws_bytes;
    a.fast_accum = fast_accum;
    a.out = fp8 ? SparseOut::kBF16 : SparseOut::kFP16;
    return sparse24_gemm(a, st, &c);
  };
  LOWBIT_RETURN_IF_ERROR(ws.alloc(ws_bytes));
  LOWBIT_RETURN_IF_ERROR(workspace_init(ws.p, ws_bytes, s));
  auto ours = [&](cudaStream_t st, int i) { return run_config(cfg, st, i, opt.fast_accum); };
  auto ours_fast = [&](cudaStream_t st, int i) { return run_config(cfg_fast, st, i, true); };

  // Dense baselines on the same (2:4, uncompressed) A: cuBLASLt, and for E4M3 our dense GEMM.
  // E4M3 also against cuBLASLt with fast accumulation: our fast-accumulation run is compared
  // with it, the promoted one with the promoted baseline (same arithmetic on both sides).
  CublasLtFp8 lt8, lt8_fast;
  CublasLtF16 lt16;
  bool baseline = opt.baseline, baseline_fast = opt.baseline && fp8;
  std::string note, note_fast;
  if (baseline) {
    const Status ps = fp8 ? lt8.plan(m, n, k, OutType::kBF16, false, d_sa, d_sb) : lt16.plan(m, n, k);
    if (!ps.ok()) {
      baseline = false;
      note = "baseline unavailable: " + ps.to_string();
    }
  }
  if (baseline_fast) {
    const Status ps = lt8_fast.plan(m, n, k, OutType::kBF16, false, d_sa, d_sb, /*fast_accum=*/true);
    if (!ps.ok()) {
      baseline_fast = false;
      note_fast = "fast-accumulation baseline unavailable: " + ps.to_string();
    }
  }
  auto base = [&](cudaStream_t st, int i) {
    return fp8 ? lt8.run(A[i % sets].p, B[i % sets].p, Dbase.p, nullptr, 1.0f, st)
               : lt16.run(A[i % sets].p, B[i % sets].p, Dbase.p, 1.0f, st);
  };
  auto base_fast = [&](cudaStream_t st, int i) {
    return lt8_fast.run(A[i % sets].p, B[i % sets].p, Dbase_fast.p, nullptr, 1.0f, st);
  };
  Fp8GemmConfig dense_cfg;
  size_t wsd_bytes = 0;
  if (fp8) {
    LOWBIT_RETURN_IF_ERROR(choose_fp8_config(m, n, k, &dense_cfg));
    dense_cfg.splits = 1;  // no workspace for the comparison run
  }
  auto dense = [&](cudaStream_t st, int i) {
    Fp8GemmArgs a;
    a.m = m;
    a.n = n;
    a.k = k;
    a.a = A[i % sets].p;
    a.b = B[i % sets].p;
    a.d = Ddense.p;
    a.a_scale = d_sa;
    a.b_scale = d_sb;
    a.workspace_bytes = wsd_bytes;
    return fp8_gemm(a, st, &dense_cfg);
  };

  // cuSPARSELt on the same 2:4 A (its own compression and search: setup, not timed). F16 inputs
  // write FP16 everywhere (ours, cuSPARSELt, dense cuBLAS), E4M3 inputs BF16.
  CusparseLtBaseline cslt;
  DeviceBuffer Dcs;
  LOWBIT_RETURN_IF_ERROR(Dcs.alloc(static_cast<size_t>(m * n) * 2));
  bool have_cslt = opt.baseline && CusparseLtBaseline::available();
  std::string cslt_note = CusparseLtBaseline::available() ? "" : "cuSPARSELt not built";
  if (have_cslt) {
    Status cs = cslt.plan(m, n, k, fp8, h_scales[0] * h_scales[1], sets);
    for (int i = 0; cs.ok() && i < sets; ++i) cs = cslt.compress(i, A[i].p, s);
    if (cs.ok()) cs = cslt.search(B[0].p, Dcs.p, s);
    if (cs.ok()) cs = cuda_status(cudaStreamSynchronize(s), "cuSPARSELt setup");
    if (!cs.ok()) {
      have_cslt = false;
      cslt_note = cs.to_string();
    } else {
      cslt_note = cslt.note();
    }
  }
  auto sparse_base = [&](cudaStream_t st, int i) { return cslt.run(i % sets, B[i % sets].p, Dcs.p, st); };

  std::vector<double> alt_err;  // per --alt config, on the same samples (-1: non-finite outputs)
  // Correctness on set 0: poison, run once, compare sampled elements with the FP64 reference.
  // Every output poisoned, so an unwritten element shows as a NaN error, not a stale value.
  for (void* out : {D.p, Dbase.p, Dbase_fast.p, Dcs.p})
    LOWBIT_RETURN_IF_ERROR(cuda_status(fill_u16(out, m * n, 0xFFFF, s), "poison"));
  // Each first run synchronized on its own, so a fault names the kernel that raised it.
  LOWBIT_RETURN_IF_ERROR(ours(s, 0));
  LOWBIT_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(s), "lowbit's first run"));
  if (baseline) keep_baseline_if_ok(base(s, 0), "baseline", &baseline, &note);
  LOWBIT_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(s), "the dense baseline's first run"));
  if (baseline_fast) keep_baseline_if_ok(base_fast(s, 0), "fast-accumulation baseline", &baseline_fast, &note_fast);
  LOWBIT_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(s), "the fast-accumulation baseline's first run"));
  if (have_cslt) keep_baseline_if_ok(sparse_base(s, 0), "cuSPARSELt", &have_cslt, &cslt_note);
  LOWBIT_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(s), "cuSPARSELt's first run"));
  {
    std::vector<uint8_t> ha(static_cast<size_t>(m * k * eb)), hb(static_cast<size_t>(n * k * eb));
    std::vector<uint8_t> hd(static_cast<size_t>(m * n) * 2), hdb(hd.size()), hdf(hd.size()), hdc(hd.size());
    cudaMemcpy(hdc.data(), Dcs.p, hdc.size(), cudaMemcpyDeviceToHost);
    cudaMemcpy(hdf.data(), Dbase_fast.p, hdf.size(), cudaMemcpyDeviceToHost);
    cudaMemcpy(ha.data(), A[0].p, ha.size(), cudaMemcpyDeviceToHost);
    cudaMemcpy(hb.data(), B[0].p, hb.size(), cudaMemcpyDeviceToHost);
    cudaMemcpy(hd.data(), D.p, hd.size(), cudaMemcpyDeviceToHost);
    cudaMemcpy(hdb.data(), Dbase.p, hdb.size(), cudaMemcpyDeviceToHost);
    LOWBIT_RETURN_IF_ERROR(cuda_status(cudaGetLastError(), "copy back"));
    // Our output: BF16 for E4M3 in, FP16 for F16 in (as cuSPARSELt's and the dense baseline's).
    auto ours_out = [&](const std::vector<uint8_t>& h, int64_t idx) -> double {
      uint16_t bits;
      std::memcpy(&bits, h.data() + 2 * idx, 2);
      return fp8 ? formats::bf16_to_float(bits) : formats::fp16_to_float(bits);
    };
    int64_t unwritten = 0;
    for (size_t i = 0; i < static_cast<size_t>(m * n); ++i)
      if (!std::isfinite(ours_out(hd, static_cast<int64_t>(i)))) ++unwritten;
    auto val = [&](const std::vector<uint8_t>& h, int64_t idx) -> double {
      if (fp8) return formats::e4m3_to_float(h[idx]);
      uint16_t bits;
      std::memcpy(&bits, h.data() + 2 * idx, 2);
      return formats::fp16_to_float(bits);
    };
    std::mt19937_64 rng(seed ^ 0x5EED);
    std::vector<double> ref, got, gotb, gotf, gotc;
    // Ours, the dense baseline and cuSPARSELt all write BF16 for E4M3 in and FP16 for F16 in.
    auto other = [&](const std::vector<uint8_t>& h, int64_t idx) -> double {
      if (fp8) return read_output(h, OutType::kBF16, static_cast<size_t>(idx));
      uint16_t bits;
      std::memcpy(&bits, h.data() + 2 * idx, 2);
      return formats::fp16_to_float(bits);
    };
    for (int t = 0; t < 2048; ++t) {
      const int64_t i = static_cast<int64_t>(rng() % m), j = static_cast<int64_t>(rng() % n);
      double acc = 0.0;
      for (int64_t q = 0; q < k; ++q) acc += val(ha, i * k + q) * val(hb, j * k + q);
      ref.push_back(acc * h_scales[0] * h_scales[1]);
      got.push_back(ours_out(hd, i * n + j));
      gotb.push_back(other(hdb, i * n + j));
      gotf.push_back(other(hdf, i * n + j));
      gotc.push_back(other(hdc, i * n + j));
    }
    const auto e = reference::compare(ref, got);
    // Fast accumulation (E4M3), then each --alt config, on the same samples.
    for (size_t c = fp8 ? 0 : 1; c < cfgs.size(); ++c) {
      LOWBIT_RETURN_IF_ERROR(cuda_status(fill_u16(D.p, m * n, 0xFFFF, s), "poison"));
      LOWBIT_RETURN_IF_ERROR(c == 0 ? ours_fast(s, 0) : run_config(cfgs[c], s, 0, opt.fast_accum));
      LOWBIT_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(s), "alt run"));
      cudaMemcpy(hd.data(), D.p, hd.size(), cudaMemcpyDeviceToHost);
      std::vector<double> alt_got;
      std::mt19937_64 again(seed ^ 0x5EED);
      for (int t = 0; t < 2048; ++t) {
        const int64_t i = static_cast<int64_t>(again() % m), j = static_cast<int64_t>(again() % n);
        alt_got.push_back(ours_out(hd, i * n + j));
      }
      const auto ea = reference::compare(ref, alt_got);
      int64_t alt_unwritten = 0;  // every element, not only the sampled ones
      for (int64_t idx = 0; idx < m * n; ++idx)
        if (!std::isfinite(ours_out(hd, idx))) ++alt_unwritten;
      if (c == 0) {
        r->err_fast = ea.rel_fro;
        if (ea.nonfinite > 0 || alt_unwritten > 0) r->status = "FAIL: fast accumulation left non-finite outputs";
      } else {
        alt_err.push_back(ea.nonfinite > 0 || alt_unwritten > 0 ? -1.0 : ea.rel_fro);
      }
    }
    r->err = e.rel_fro;
    r->max_err = e.max_rel;
    if (baseline)
      r->err_base = baseline_error(ref, gotb, "baseline unavailable: dense baseline", &baseline, &note).rel_fro;
    if (baseline_fast)
      r->err_base_fast =
          baseline_error(ref, gotf, "fast-accumulation baseline", &baseline_fast, &note_fast).rel_fro;
    if (have_cslt) r->err_cusparselt = baseline_error(ref, gotc, "cuSPARSELt", &have_cslt, &cslt_note).rel_fro;
    if (unwritten > 0) r->status = "FAIL: " + std::to_string(unwritten) + " outputs not written";
    else if (e.nonfinite > 0) r->status = "FAIL: non-finite outputs";
    // Each of ours against the baseline with its arithmetic; BF16 (E4M3 in) or FP16 output
    // rounding alone gives ~1.6e-3 / ~2e-4 here (docs/perf.md W3).
    const double fallback = fp8 ? 4e-3 : 5e-4;
    if (opt.fast_accum) {
      gate_error(r, "fast-accumulation", e.rel_fro, r->err_base_fast, fallback);
    } else {
      gate_error(r, "sampled", e.rel_fro, r->err_base, fallback);
      if (fp8) gate_error(r, "fast-accumulation", r->err_fast, r->err_base_fast, fallback);
    }
    // The --alt configs run with the headline's accumulation: the same bound, against the
    // matching baseline (they are timed, so they are checked).
    for (size_t c = 1; c < cfgs.size(); ++c) {
      const std::string what = "alt " + cfgs[c].to_string();
      if (alt_err[c - 1] < 0) {
        if (r->status.empty()) r->status = "FAIL: " + what + ": unwritten or non-finite outputs";
      } else {
        gate_error(r, what.c_str(), alt_err[c - 1], opt.fast_accum ? r->err_base_fast : r->err_base, fallback);
      }
    }
  }

  std::printf("  %s %lldx%lldx%lld: lowbit %s | %s\n", fp8 ? "e4m3" : "f16", (long long)m, (long long)n, (long long)k,
              cfg.to_string().c_str(),
              baseline ? (fp8 ? lt8.algo_note() : lt16.algo_note()).c_str() : note.c_str());
  std::printf("  sparse baseline: %s\n", cslt_note.c_str());
  double rough = 0.0;
  LOWBIT_RETURN_IF_ERROR(rough_time_us(ours, s, &rough));
  const int batch = std::clamp(static_cast<int>(2000.0 / std::max(rough, 1.0)), 3, 200);
  std::vector<LaunchFn> launches = {ours};
  if (baseline) launches.push_back(base);
  if (fp8) launches.push_back(dense);
  if (have_cslt) launches.push_back(sparse_base);
  const size_t fast_at = launches.size();
  if (fp8) launches.push_back(ours_fast);
  const size_t base_fast_at = launches.size();
  if (baseline_fast) launches.push_back(base_fast);
  const size_t first_alt = launches.size();
  for (size_t c = 1; c < cfgs.size(); ++c)
    launches.push_back([&, c](cudaStream_t st, int i) { return run_config(cfgs[c], st, i, opt.fast_accum); });
  std::vector<Timing> timings;
  LOWBIT_RETURN_IF_ERROR(time_graphs_interleaved(launches, s, batch, opt.samples, &timings));
  // The alternates run with the headline's accumulation: compared with the matching baseline.
  const bool alt_base = opt.fast_accum ? baseline_fast : baseline;
  const double alt_base_us = !alt_base ? 0.0 : timings[opt.fast_accum ? base_fast_at : 1].median_us;
  for (size_t c = 1; c < cfgs.size(); ++c) {
    const double us = timings[first_alt + c - 1].median_us;
    std::printf("  alt %-44s %9.1f us  (%.3f x the reported config, %.3f x dense cuBLASLt%s, %.3f x cuSPARSELt) err %.3e\n",
                cfgs[c].to_string().c_str(), us, timings[0].median_us / us, alt_base_us / us,
                opt.fast_accum ? " fast-accum" : "", have_cslt ? timings[fast_at - 1].median_us / us : 0.0,
                alt_err[c - 1]);
  }
  r->us_fast = fp8 ? timings[fast_at].median_us : 0.0;
  r->us_base_fast = baseline_fast ? timings[base_fast_at].median_us : 0.0;
  r->us = timings[0].median_us;
  // The headline compares like with like: with --fast-accum, against fast-accumulation cuBLASLt.
  r->us_base = opt.fast_accum ? r->us_base_fast : baseline ? timings[1].median_us : 0.0;
  if (opt.fast_accum) {
    r->err_base = r->err_base_fast;
    note = note_fast;
  }
  r->us_fp8_ours = fp8 ? timings[baseline ? 2 : 1].median_us : 0.0;
  r->us_cusparselt = have_cslt ? timings[fast_at - 1].median_us : 0.0;

  // Dense-equivalent FLOPs (what the product means); the floor counts the sparse tensor rate
  // (twice the dense one) and the bytes actually read (half of A plus its metadata).
  const double flops = 2.0 * m * n * k;
  const double bytes = static_cast<double>(m * k / 2 * eb) + m * k / 8.0 + static_cast<double>(n * k * eb) + 2.0 * m * n;
  const double peak = 2.0 * (fp8 ? kPeakFp8Tflops : kPeakBf16Tflops);
  set_rates(r, flops, bytes, peak, batch, opt.samples, note);
  if (r->status == "ok" && opt.baseline && !have_cslt) r->status = "ok (cuSPARSELt unavailable: " + cslt_note + ")";
  if (r->status == "ok" && fp8 && opt.baseline && !baseline_fast) r->status = "ok (" + note_fast + ")";
  return Status::Ok();
}

}  // namespace lowbit::bench
