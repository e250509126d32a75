// W1: dense FP8 GEMM against cuBLASLt, same process, same inputs.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "bench.h"
#include "bench_util.h"
#include "cublaslt_fp8.h"
#include "device_fill.h"
#include "formats/bf16.h"
#include "formats/e4m3.h"
#include "formats/fp16.h"
#include "lowbit/device.h"
#include "reference/reference_gemm.h"
#include "timing.h"

namespace lowbit::bench {

Status run_fp8_shape(const Options& opt, const Shape& sh, Result* r) {
  r->shape = sh;
  DeviceInfo dev;
  LOWBIT_RETURN_IF_ERROR(query_device(&dev));
  const int64_t m = sh.m, n = sh.n, k = sh.k;
  const size_t out_bytes = opt.out == OutType::kFP32 ? 4 : 2;
  // Ours and cuBLASLt read the same operands.
  const int sets = rotation_sets(dev.l2_bytes, static_cast<size_t>(m * k + n * k), 16);

  OwnedStream stream;
  LOWBIT_RETURN_IF_ERROR(stream.create());
  cudaStream_t s = stream.s;

  std::vector<DeviceBuffer> A(sets), B(sets);
  DeviceBuffer D, Dbase, bias, bias16, scales, row_a, row_b, ws;
  const uint64_t seed = opt.seed;
  for (int i = 0; i < sets; ++i) {
    LOWBIT_RETURN_IF_ERROR(A[i].alloc(static_cast<size_t>(m * k)));
    LOWBIT_RETURN_IF_ERROR(B[i].alloc(static_cast<size_t>(n * k)));
    LOWBIT_RETURN_IF_ERROR(cuda_status(fill_e4m3_uniform(A[i].p, m * k, 4.0f, seed * 1000 + 2 * i, s), "fill A"));
    LOWBIT_RETURN_IF_ERROR(cuda_status(fill_e4m3_uniform(B[i].p, n * k, 4.0f, seed * 1000 + 2 * i + 1, s), "fill B"));
  }
  LOWBIT_RETURN_IF_ERROR(D.alloc(static_cast<size_t>(m * n) * out_bytes));
  LOWBIT_RETURN_IF_ERROR(Dbase.alloc(static_cast<size_t>(m * n) * out_bytes));
  LOWBIT_RETURN_IF_ERROR(bias.alloc(static_cast<size_t>(n) * 2));
  LOWBIT_RETURN_IF_ERROR(cuda_status(fill_bf16_uniform(bias.p, n, 1.0f, seed * 1000 + 999, s), "fill bias"));
  // Each scale in its own 256-byte line, as separate framework tensors would be.
  LOWBIT_RETURN_IF_ERROR(scales.alloc(512));
  const float h_scales[2] = {0.0625f, 0.03125f};
  float* d_sa = static_cast<float*>(scales.p);
  float* d_sb = d_sa + 64;
  LOWBIT_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(d_sa, &h_scales[0], 4, cudaMemcpyHostToDevice, s), "scales"));
  LOWBIT_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(d_sb, &h_scales[1], 4, cudaMemcpyHostToDevice, s), "scales"));
  const float alpha = 1.0f;
  // --rowwise: a random positive scale per row of A (per token) and of B (per output channel), in
  // place of the per-tensor ones, spread over a decade so that a scale applied to the wrong row or
  // column shows in the error.
  std::vector<float> h_row_a, h_row_b;
  const float* d_row_a = nullptr;
  const float* d_row_b = nullptr;
  if (opt.rowwise) {
    std::mt19937_64 srng(seed ^ 0x5CA1E);
    std::uniform_real_distribution<float> dist(0.01f, 0.1f);
    for (int64_t i = 0; i < m; ++i) h_row_a.push_back(dist(srng));
    for (int64_t j = 0; j < n; ++j) h_row_b.push_back(dist(srng));
    LOWBIT_RETURN_IF_ERROR(row_a.alloc(static_cast<size_t>(m) * 4));
    LOWBIT_RETURN_IF_ERROR(row_b.alloc(static_cast<size_t>(n) * 4));
    LOWBIT_RETURN_IF_ERROR(cuda_status(
        cudaMemcpyAsync(row_a.p, h_row_a.data(), h_row_a.size() * 4, cudaMemcpyHostToDevice, s), "row scales"));
    LOWBIT_RETURN_IF_ERROR(cuda_status(
        cudaMemcpyAsync(row_b.p, h_row_b.data(), h_row_b.size() * 4, cudaMemcpyHostToDevice, s), "row scales"));
    d_row_a = static_cast<const float*>(row_a.p);
    d_row_b = static_cast<const float*>(row_b.p);
  }
  // cuBLASLt takes an FP16 bias with FP16 output: the same values (BF16 in [-1, 1] converts
  // exactly except below FP16's normal range, 2^-14, where it is off by under 2^-25).
  const void* base_bias = opt.bias ? bias.p : nullptr;
  if (opt.bias && opt.out == OutType::kFP16) {
    std::vector<uint16_t> hb(static_cast<size_t>(n));
    LOWBIT_RETURN_IF_ERROR(
        cuda_status(cudaMemcpyAsync(hb.data(), bias.p, hb.size() * 2, cudaMemcpyDeviceToHost, s), "bias"));
    LOWBIT_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(s), "bias"));
    for (auto& v : hb) v = formats::float_to_fp16(formats::bf16_to_float(v));
    LOWBIT_RETURN_IF_ERROR(bias16.alloc(hb.size() * 2));
    LOWBIT_RETURN_IF_ERROR(
        cuda_status(cudaMemcpyAsync(bias16.p, hb.data(), hb.size() * 2, cudaMemcpyHostToDevice, s), "bias"));
    base_bias = bias16.p;
  }

  // cfgs[0] is the one reported; the --alt configs are timed alongside it, interleaved.
  std::vector<Fp8GemmConfig> cfgs;
  size_t ws_bytes = 0;
  // Per-row scales and FP16 output run the bias epilogue's kernels (lowbit/gemm.h).
  const bool bias_kernels = opt.bias || opt.rowwise || opt.out == OutType::kFP16;
  LOWBIT_RETURN_IF_ERROR(resolve_configs(opt, m, n, k, &cfgs, &ws_bytes,
                                         bias_kernels ? Fp8EpilogueKind::kBias : Fp8EpilogueKind::kPlain));
  LOWBIT_RETURN_IF_ERROR(ws.alloc(ws_bytes));
  LOWBIT_RETURN_IF_ERROR(workspace_init(ws.p, ws_bytes, s));
  const Fp8GemmConfig& cfg = cfgs[0];
  r->config = cfg.to_string();
  if (opt.explain) std::printf("%s", explain_fp8_config(m, n, k).c_str());

  auto run_config = [&](const Fp8GemmConfig& c, cudaStream_t st, int i) {
    Fp8GemmArgs a;
    a.m = m;
    a.n = n;
    a.k = k;
    a.a = A[i % sets].p;
    a.b = B[i % sets].p;
    a.d = D.p;
    a.out_type = opt.out;
    a.alpha = alpha;
    a.a_scale = opt.rowwise ? nullptr : d_sa;
    a.b_scale = opt.rowwise ? nullptr : d_sb;
    a.a_row_scale = d_row_a;
    a.b_row_scale = d_row_b;
    a.bias = opt.bias ? bias.p : nullptr;
    a.workspace = ws.p;
    a.workspace_bytes = ws_bytes;
    return fp8_gemm(a, st, &c);
  };
  auto ours = [&](cudaStream_t st, int i) { return run_config(cfg, st, i); };
  CublasLtFp8 lt;
  bool baseline = opt.baseline;
  std::string baseline_note;
  if (baseline) {
    const Status ps = opt.rowwise ? lt.plan_rowwise(m, n, k, opt.out, opt.bias, d_row_a, d_row_b)
                                  : lt.plan(m, n, k, opt.out, opt.bias, d_sa, d_sb);
    if (!ps.ok()) {
      baseline = false;
      baseline_note = "baseline unavailable: " + ps.to_string();
    }
  }
  auto base = [&](cudaStream_t st, int i) {
    return lt.run(A[i % sets].p, B[i % sets].p, Dbase.p, base_bias, alpha, st);
  };

  // Correctness on set 0: poison both outputs, run once each, compare sampled elements with the
  // FP64 reference on the same E4M3 inputs.
  LOWBIT_RETURN_IF_ERROR(cuda_status(fill_u16(D.p, m * n * out_bytes / 2, 0xFFFF, s), "poison"));
  LOWBIT_RETURN_IF_ERROR(cuda_status(fill_u16(Dbase.p, m * n * out_bytes / 2, 0xFFFF, s), "poison"));
  LOWBIT_RETURN_IF_ERROR(ours(s, 0));
  if (baseline) keep_baseline_if_ok(base(s, 0), "baseline", &baseline, &baseline_note);
  LOWBIT_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(s), "run"));
  {
    std::vector<uint8_t> ha(static_cast<size_t>(m * k)), hb(static_cast<size_t>(n * k));
    std::vector<uint8_t> hd(static_cast<size_t>(m * n) * out_bytes), hdb(hd.size());
    std::vector<uint16_t> hbias(static_cast<size_t>(n));
    cudaMemcpy(ha.data(), A[0].p, ha.size(), cudaMemcpyDeviceToHost);
    cudaMemcpy(hb.data(), B[0].p, hb.size(), cudaMemcpyDeviceToHost);
    cudaMemcpy(hd.data(), D.p, hd.size(), cudaMemcpyDeviceToHost);
    cudaMemcpy(hdb.data(), Dbase.p, hdb.size(), cudaMemcpyDeviceToHost);
    cudaMemcpy(hbias.data(), bias.p, hbias.size() * 2, cudaMemcpyDeviceToHost);
    LOWBIT_RETURN_IF_ERROR(cuda_status(cudaGetLastError(), "copy back"));
    // Every element of ours must have been written (no NaN left from the poison).
    int64_t unwritten = 0;
    for (size_t i = 0; i < static_cast<size_t>(m * n); ++i)
      if (!std::isfinite(read_output(hd, opt.out, i))) ++unwritten;
    std::mt19937_64 rng(seed ^ 0x5EED);
    const int samples = 2048;
    std::vector<double> ref, got, gotb;
    std::vector<int64_t> sampled;
    float lut[256];
    for (int c = 0; c < 256; ++c) lut[c] = formats::e4m3_to_float(static_cast<uint8_t>(c));
    for (int t = 0; t < samples; ++t) {
      const int64_t i = static_cast<int64_t>(rng() % m), j = static_cast<int64_t>(rng() % n);
      double acc = 0.0;
      for (int64_t q = 0; q < k; ++q) acc += static_cast<double>(lut[ha[i * k + q]]) * lut[hb[j * k + q]];
      acc *= static_cast<double>(alpha) * (opt.rowwise ? static_cast<double>(h_row_a[i]) * h_row_b[j]
                                                       : static_cast<double>(h_scales[0]) * h_scales[1]);
      if (opt.bias) acc += formats::bf16_to_float(hbias[j]);
      ref.push_back(acc);
      sampled.push_back(i * n + j);
      got.push_back(read_output(hd, opt.out, static_cast<size_t>(i * n + j)));
      gotb.push_back(read_output(hdb, opt.out, static_cast<size_t>(i * n + j)));
    }
    const auto e = reference::compare(ref, got);
    r->err = e.rel_fro;
    r->max_err = e.max_rel;
    if (baseline) {
      const auto eb = baseline_error(ref, gotb, "baseline unavailable: cuBLASLt", &baseline, &baseline_note);
      r->err_base = eb.rel_fro;
      r->max_err_base = eb.max_rel;
    }
    if (unwritten > 0) {
      r->status = "FAIL: " + std::to_string(unwritten) + " outputs not written";
    } else if (e.nonfinite > 0) {
      r->status = "FAIL: non-finite outputs";
    }
    // BF16 output rounding alone gives ~1.6e-3 here, FP32 output ~1e-4 (docs/perf.md W1); FP16
    // rounds 8x finer than BF16.
    const double fallback = opt.out == OutType::kFP32 ? 4e-4 : opt.out == OutType::kFP16 ? 1e-3 : 4e-3;
    gate_error(r, "sampled", e.rel_fro, r->err_base, fallback);
    // Each --alt config is timed too, so it is checked the same way: poisoned output, every
    // element written, the sampled error within the same bound.
    for (size_t c = 1; c < cfgs.size(); ++c) {
      int64_t alt_unwritten = 0;
      std::vector<double> gota;
      LOWBIT_RETURN_IF_ERROR(rerun_and_sample([&](cudaStream_t st) { return run_config(cfgs[c], st, 0); }, D.p, m * n,
                                              opt.out, sampled, s, &alt_unwritten, &gota));
      const auto ea = reference::compare(ref, gota);
      const std::string what = "alt " + cfgs[c].to_string();
      if (r->status.empty() && alt_unwritten > 0)
        r->status = "FAIL: " + what + ": " + std::to_string(alt_unwritten) + " outputs not written";
      gate_error(r, what.c_str(), ea.rel_fro, r->err_base, fallback);
    }
  }

  std::printf("  %lldx%lldx%lld: lowbit %s | %s\n", (long long)m, (long long)n, (long long)k, cfg.to_string().c_str(),
              baseline ? lt.algo_note().c_str() : baseline_note.c_str());
  // Timing: batches long enough that each graph replay runs >= ~2 ms.
  double rough = 0.0;
  LOWBIT_RETURN_IF_ERROR(rough_time_us(ours, s, &rough));
  const int batch = std::clamp(static_cast<int>(2000.0 / std::max(rough, 1.0)), 3, 200);
  std::vector<LaunchFn> launches = {ours};
  if (baseline) launches.push_back(base);
  for (size_t c = 1; c < cfgs.size(); ++c)
    launches.push_back([&, c](cudaStream_t st, int i) { return run_config(cfgs[c], st, i); });
  std::vector<Timing> timings;
  LOWBIT_RETURN_IF_ERROR(time_graphs_interleaved(launches, s, batch, opt.samples, &timings));
  const Timing t_ours = timings[0];
  const Timing t_base = baseline ? timings[1] : Timing{};
  for (size_t c = 1; c < cfgs.size(); ++c) {
    const double us = timings[launches.size() - cfgs.size() + c].median_us;
    std::printf("  alt %-44s %9.1f us  (%.3f x the reported config%s)\n", cfgs[c].to_string().c_str(), us,
                t_ours.median_us / us, baseline ? (", " + std::to_string(t_base.median_us / us) + " x cuBLASLt").c_str() : "");
  }

  const double flops = 2.0 * m * n * k;
  const double bytes = static_cast<double>(m * k + n * k) + static_cast<double>(m * n) * out_bytes +
                       (opt.bias ? 2.0 * n : 0.0) + (opt.rowwise ? 4.0 * (m + n) : 0.0);
  r->us = t_ours.median_us;
  r->us_base = baseline ? t_base.median_us : 0.0;
  set_rates(r, flops, bytes, kPeakFp8Tflops, batch, opt.samples, baseline_note);
  return Status::Ok();
}

}  // namespace lowbit::bench
