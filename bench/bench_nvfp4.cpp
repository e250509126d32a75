// W4: NVFP4 GEMM (NVFP4 x NVFP4, and W4A16) against cuBLASLt FP8, cuBLAS BF16 and our FP8 GEMM,
// same process, same shapes. Weights are random NVFP4 bytes and E4M3 scales generated on the
// device, prepacked once (load time, not timed); input sets rotate past 2x L2.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "bench.h"
#include "bench_util.h"
#include "cublaslt_fp8.h"
#include "device_fill.h"
#include "formats/bf16.h"
#include "formats/e4m3.h"
#include "formats/nvfp4.h"
#include "lowbit/device.h"
#include "lowbit/nvfp4.h"
#include "nvfp4_check.h"
#include "reference/reference_gemm.h"
#include "timing.h"

namespace lowbit::bench {
namespace {

// Scale codes 0x30..0x40: E4M3 0.5 .. 2, and NVFP4 global scales of a typical magnitude.
constexpr int kScaleLo = 0x30, kScaleHi = 0x40;
constexpr float kGlobalA = 0.02f, kGlobalB = 0.005f;

struct CublasBf16 {
  cublasHandle_t h = nullptr;
  DeviceBuffer ws;
  ~CublasBf16() {
    if (h) cublasDestroy(h);
  }
  Status init() {
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return Status::Error(StatusCode::kCudaError, "cublasCreate");
    LOWBIT_RETURN_IF_ERROR(ws.alloc(32 << 20));
    // A fixed workspace: cuBLAS allocates nothing while a graph is captured.
    if (cublasSetWorkspace(h, ws.p, 32 << 20) != CUBLAS_STATUS_SUCCESS)
      return Status::Error(StatusCode::kCudaError, "cublasSetWorkspace");
    return Status::Ok();
  }
  // D[m, n] = A[m, k] . B[n, k]^T, all row-major BF16 (column-major: D^T = B . A^T).
  Status run(const void* a, const void* b, void* d, int64_t m, int64_t n, int64_t k, cudaStream_t s) {
    cublasSetStream(h, s);
    const float one = 1.0f, zero = 0.0f;
    const cublasStatus_t st =
        cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &one, b,
                     CUDA_R_16BF, static_cast<int>(k), a, CUDA_R_16BF, static_cast<int>(k), &zero, d, CUDA_R_16BF,
                     static_cast<int>(n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    return st == CUBLAS_STATUS_SUCCESS ? Status::Ok() : Status::Error(StatusCode::kCudaError, "cublasGemmEx");
  }
};

}  // namespace

Status run_nvfp4_shape(const Options& opt, const Shape& sh, Result* r) {
  r->shape = sh;
  DeviceInfo dev;
  LOWBIT_RETURN_IF_ERROR(query_device(&dev));
  const int64_t m = sh.m, n = sh.n, k = sh.k;
  const size_t w_bytes = static_cast<size_t>(n * k / 2), ws_scale = static_cast<size_t>(n * k / 16);
  const size_t pre_bytes = nvfp4_prepacked_bytes(n, k);
  // Sets rotate so that two L2s' worth of operands pass between reuses, counted for the smallest
  // reader (ours with NVFP4 activations: 4.5 bits per element of both operands); the FP8 and
  // BF16 baselines read more per set and so reuse even later.
  const int sets = rotation_sets(dev.l2_bytes, static_cast<size_t>((n * k + m * k) * 9 / 16));

  OwnedStream stream;
  LOWBIT_RETURN_IF_ERROR(stream.create());
  cudaStream_t s = stream.s;
  const uint64_t seed = opt.seed * 1000 + 77;

  std::vector<DeviceBuffer> W(sets), A4(sets), A4s(sets), Abf(sets), A8(sets), B8(sets), Bbf(sets);
  DeviceBuffer wpacked, wscales, D, Dbase, scales;
  LOWBIT_RETURN_IF_ERROR(wpacked.alloc(w_bytes));
  LOWBIT_RETURN_IF_ERROR(wscales.alloc(ws_scale));
  const bool bf16_baseline = opt.baseline && static_cast<double>(n) * k * 2 * sets < 12e9;
  for (int i = 0; i < sets; ++i) {
    LOWBIT_RETURN_IF_ERROR(cuda_status(fill_u8_range(wpacked.p, w_bytes, 0, 255, seed + 10 * i, s), "fill W"));
    LOWBIT_RETURN_IF_ERROR(cuda_status(fill_u8_range(wscales.p, ws_scale, kScaleLo, kScaleHi, seed + 10 * i + 1, s), "fill W scales"));
    LOWBIT_RETURN_IF_ERROR(W[i].alloc(pre_bytes));
    Nvfp4PrepackArgs pa;
    pa.n = n;
    pa.k = k;
    pa.packed = wpacked.p;
    pa.scales = wscales.p;
    pa.out = W[i].p;
    pa.out_bytes = pre_bytes;
    LOWBIT_RETURN_IF_ERROR(nvfp4_prepack_weights(pa, s));
    LOWBIT_RETURN_IF_ERROR(A4[i].alloc(static_cast<size_t>(m * k / 2)));
    LOWBIT_RETURN_IF_ERROR(A4s[i].alloc(static_cast<size_t>(m * k / 16)));
    LOWBIT_RETURN_IF_ERROR(Abf[i].alloc(static_cast<size_t>(m * k * 2)));
    LOWBIT_RETURN_IF_ERROR(cuda_status(fill_u8_range(A4[i].p, m * k / 2, 0, 255, seed + 10 * i + 2, s), "fill A"));
    LOWBIT_RETURN_IF_ERROR(cuda_status(fill_u8_range(A4s[i].p, m * k / 16, kScaleLo, kScaleHi, seed + 10 * i + 3, s), "fill A scales"));
    LOWBIT_RETURN_IF_ERROR(cuda_status(fill_bf16_uniform(Abf[i].p, m * k, 1.0f, seed + 10 * i + 4, s), "fill A bf16"));
    if (opt.baseline) {
      LOWBIT_RETURN_IF_ERROR(A8[i].alloc(static_cast<size_t>(m * k)));
      LOWBIT_RETURN_IF_ERROR(B8[i].alloc(static_cast<size_t>(n * k)));
      LOWBIT_RETURN_IF_ERROR(cuda_status(fill_e4m3_uniform(A8[i].p, m * k, 4.0f, seed + 10 * i + 5, s), "fill A8"));
      LOWBIT_RETURN_IF_ERROR(cuda_status(fill_e4m3_uniform(B8[i].p, n * k, 4.0f, seed + 10 * i + 6, s), "fill B8"));
      if (bf16_baseline) {
        LOWBIT_RETURN_IF_ERROR(Bbf[i].alloc(static_cast<size_t>(n * k * 2)));
        LOWBIT_RETURN_IF_ERROR(cuda_status(fill_bf16_uniform(Bbf[i].p, n * k, 1.0f, seed + 10 * i + 7, s), "fill Bbf"));
      }
    }
  }
  LOWBIT_RETURN_IF_ERROR(D.alloc(static_cast<size_t>(m * n * 2)));
  LOWBIT_RETURN_IF_ERROR(Dbase.alloc(static_cast<size_t>(m * n * 2)));
  LOWBIT_RETURN_IF_ERROR(scales.alloc(512));
  const float h_scales[2] = {0.0625f, 0.03125f};
  float* d_sa = static_cast<float*>(scales.p);
  float* d_sb = d_sa + 64;
  LOWBIT_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(d_sa, &h_scales[0], 4, cudaMemcpyHostToDevice, s), "scales"));
  LOWBIT_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(d_sb, &h_scales[1], 4, cudaMemcpyHostToDevice, s), "scales"));

  // Configs: [0] reported (forced or chosen), then --alt.
  std::vector<Nvfp4GemmConfig> cfgs;
  LOWBIT_RETURN_IF_ERROR(config_list(
      opt, parse_nvfp4_config, [&](Nvfp4GemmConfig* c) { return choose_nvfp4_config(m, n, k, c); }, &cfgs));
  size_t ws_bytes = 0;
  for (const auto& c : cfgs) ws_bytes = std::max(ws_bytes, nvfp4_gemm_workspace_size(m, n, k, true, c));
  DeviceBuffer ws;
  LOWBIT_RETURN_IF_ERROR(ws.alloc(ws_bytes));
  LOWBIT_RETURN_IF_ERROR(workspace_init(ws.p, ws_bytes, s));
  r->config = cfgs[0].to_string();
  if (opt.explain) std::printf("  nvfp4 %lldx%lldx%lld: %s\n", (long long)m, (long long)n, (long long)k, cfgs[0].reason.c_str());

  auto run_cfg = [&](const Nvfp4GemmConfig& c, bool fp4_act, cudaStream_t st, int i) {
    Nvfp4GemmArgs a;
    a.m = m;
    a.n = n;
    a.k = k;
    if (fp4_act) {
      a.a_packed = A4[i % sets].p;
      a.a_scales = A4s[i % sets].p;
      a.a_global_scale = kGlobalA;
    } else {
      a.a_bf16 = Abf[i % sets].p;
    }
    a.b_prepacked = W[i % sets].p;
    a.b_global_scale = kGlobalB;
    a.d = D.p;
    a.workspace = ws.p;
    a.workspace_bytes = ws_bytes;
    return nvfp4_gemm(a, st, &c);
  };
  auto ours = [&](cudaStream_t st, int i) { return run_cfg(cfgs[0], true, st, i); };
  auto ours_w4a16 = [&](cudaStream_t st, int i) { return run_cfg(cfgs[0], false, st, i); };

  // Correctness on set 0: poison, run, compare sampled outputs with the FP64 reference over the
  // dequantized operands (the prepack's source bytes of set 0 are gone, so regenerate them with
  // the same seed). Every path that is timed is checked: the reported config with NVFP4
  // activations (its error is the row's), the same config with BF16 activations (W4A16), and
  // each --alt config.
  LOWBIT_RETURN_IF_ERROR(cuda_status(fill_u8_range(wpacked.p, w_bytes, 0, 255, seed, s), "fill W"));
  LOWBIT_RETURN_IF_ERROR(cuda_status(fill_u8_range(wscales.p, ws_scale, kScaleLo, kScaleHi, seed + 1, s), "fill W scales"));
  LOWBIT_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(s), "regenerate"));
  std::vector<uint8_t> wp(w_bytes), wsc(ws_scale), ap(static_cast<size_t>(m * k / 2)), asc(static_cast<size_t>(m * k / 16));
  std::vector<uint16_t> abf(static_cast<size_t>(m * k));
  cudaMemcpy(wp.data(), wpacked.p, wp.size(), cudaMemcpyDeviceToHost);
  cudaMemcpy(wsc.data(), wscales.p, wsc.size(), cudaMemcpyDeviceToHost);
  cudaMemcpy(ap.data(), A4[0].p, ap.size(), cudaMemcpyDeviceToHost);
  cudaMemcpy(asc.data(), A4s[0].p, asc.size(), cudaMemcpyDeviceToHost);
  cudaMemcpy(abf.data(), Abf[0].p, abf.size() * 2, cudaMemcpyDeviceToHost);
  LOWBIT_RETURN_IF_ERROR(cuda_status(cudaGetLastError(), "copy back"));
  auto check = [&](const Nvfp4GemmConfig& c, bool fp4_act, const std::string& what) -> Status {
    LOWBIT_RETURN_IF_ERROR(cuda_status(fill_u16(D.p, m * n, 0xFFFF, s), "poison"));
    LOWBIT_RETURN_IF_ERROR(run_cfg(c, fp4_act, s, 0));
    LOWBIT_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(s), "run"));
    std::vector<uint16_t> hd(static_cast<size_t>(m * n));
    LOWBIT_RETURN_IF_ERROR(cuda_status(cudaMemcpy(hd.data(), D.p, hd.size() * 2, cudaMemcpyDeviceToHost), "copy D"));
    std::vector<double> ref, got;
    if (fp4_act)
      sample_nvfp4_outputs(ap, asc, wp, wsc, hd, m, n, k, static_cast<double>(kGlobalA) * kGlobalB, 512,
                           seed ^ 0x5EED, &ref, &got);
    else
      sample_w4a16_outputs(abf, wp, wsc, hd, m, n, k, kGlobalB, 512, seed ^ 0xA16, &ref, &got);
    nvfp4_verdict(ref, got, count_nonfinite_bf16(hd), r, what);
    return Status::Ok();
  };
  LOWBIT_RETURN_IF_ERROR(check(cfgs[0], true, ""));
  LOWBIT_RETURN_IF_ERROR(check(cfgs[0], false, "W4A16"));
  for (size_t c = 1; c < cfgs.size(); ++c) LOWBIT_RETURN_IF_ERROR(check(cfgs[c], true, "alt " + cfgs[c].to_string()));

  // Baselines.
  CublasLtFp8 lt;
  bool lt_ok = opt.baseline;
  if (lt_ok) lt_ok = lt.plan(m, n, k, OutType::kBF16, false, d_sa, d_sb).ok();
  auto base = [&](cudaStream_t st, int i) { return lt.run(A8[i % sets].p, B8[i % sets].p, Dbase.p, nullptr, 1.0f, st); };
  CublasBf16 cb;
  bool cb_ok = bf16_baseline && cb.init().ok();
  auto base_bf16 = [&](cudaStream_t st, int i) { return cb.run(Abf[i % sets].p, Bbf[i % sets].p, Dbase.p, m, n, k, st); };
  Fp8GemmConfig fcfg;
  bool f8_ok = opt.baseline && choose_fp8_config(m, n, k, &fcfg).ok();
  const size_t f8_ws = f8_ok ? fp8_gemm_workspace_size(m, n, k, fcfg) : 0;
  DeviceBuffer f8ws;
  if (f8_ok) f8_ok = f8ws.alloc(f8_ws).ok() && workspace_init(f8ws.p, f8_ws, s).ok();
  auto ours_fp8 = [&](cudaStream_t st, int i) {
    Fp8GemmArgs a;
    a.m = m;
    a.n = n;
    a.k = k;
    a.a = A8[i % sets].p;
    a.b = B8[i % sets].p;
    a.d = Dbase.p;
    a.a_scale = d_sa;
    a.b_scale = d_sb;
    a.workspace = f8ws.p;
    a.workspace_bytes = f8_ws;
    return fp8_gemm(a, st, &fcfg);
  };

  // Our FP8 GEMM on the FP8 operands (a column, not the baseline): every output written. Its
  // accuracy is the FP8 suites' business.
  if (f8_ok) {
    int64_t bad = 0;
    std::vector<double> none;
    LOWBIT_RETURN_IF_ERROR(rerun_and_sample([&](cudaStream_t st) { return ours_fp8(st, 0); }, Dbase.p, m * n,
                                            OutType::kBF16, {}, s, &bad, &none));
    if (bad > 0 && r->status.empty()) r->status = "FAIL: our FP8 GEMM left " + std::to_string(bad) + " outputs unwritten";
  }

  double rough = 0.0;
  LOWBIT_RETURN_IF_ERROR(rough_time_us(ours, s, &rough));
  const int batch = std::clamp(static_cast<int>(2000.0 / std::max(rough, 1.0)), 3, 200);
  std::vector<LaunchFn> launches = {ours, ours_w4a16};
  int i_lt = -1, i_cb = -1, i_f8 = -1;
  if (lt_ok) { i_lt = static_cast<int>(launches.size()); launches.push_back(base); }
  if (cb_ok) { i_cb = static_cast<int>(launches.size()); launches.push_back(base_bf16); }
  if (f8_ok) { i_f8 = static_cast<int>(launches.size()); launches.push_back(ours_fp8); }
  std::vector<Timing> t;
  LOWBIT_RETURN_IF_ERROR(time_with_alt_configs(
      launches, cfgs, [&](const Nvfp4GemmConfig& c, cudaStream_t st, int i) { return run_cfg(c, true, st, i); }, s,
      batch, opt.samples, &t));

  const double flops = 2.0 * m * n * k;
  const double bytes = static_cast<double>(n * k) / 2 + static_cast<double>(n * k) / 16 +
                       static_cast<double>(m * k) / 2 + static_cast<double>(m * k) / 16 + static_cast<double>(m * n) * 2;
  r->us = t[0].median_us;
  r->us_w4a16 = t[1].median_us;
  r->us_base = i_lt >= 0 ? t[i_lt].median_us : 0.0;
  r->us_bf16 = i_cb >= 0 ? t[i_cb].median_us : 0.0;
  r->us_fp8_ours = i_f8 >= 0 ? t[i_f8].median_us : 0.0;
  r->tflops = flops / (r->us * 1e6);
  r->gbs = bytes / (r->us * 1e3);
  // workloads.md's floor, max(FLOPs / the FP8 peak, bytes / bandwidth): 23.0 / 6.0 / 3.4 us at
  // M = 128. The floor of an exact kernel on Hopper is higher: no FP4 MMA, and E2M1 x E4M3
  // products need a 16-bit mantissa, so its MMAs run at the BF16 rate -- printed apart
  // (compute_floor_us, 30.4 / 7.6 / 3.8 us at M = 128; docs/perf.md W4).
  r->compute_floor_us = flops / (kPeakBf16Tflops * 1e6);
  r->floor_us = std::max(bytes / (kCopyTBs * 1e6), flops / (kPeakFp8Tflops * 1e6));
  r->pct_floor = 100.0 * r->floor_us / r->us;
  r->speedup = r->us_base > 0 ? r->us_base / r->us : 0.0;
  r->x_bf16 = r->us_bf16 > 0 ? r->us_bf16 / r->us : 0.0;
  r->batch = batch;
  r->samples = opt.samples;
  if (r->status.empty()) r->status = lt_ok ? "ok" : "ok (cuBLASLt FP8 baseline unavailable)";
  return Status::Ok();
}

}  // namespace lowbit::bench
