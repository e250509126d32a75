// W2: ViT patch embedding, D = A . B^T + bias + pos[r mod P], FP8 in, BF16 out.
// Same-run baselines on the same inputs: (a) cuBLASLt FP8 GEMM with its bias epilogue, alone;
// (b) the unfused pipeline a user would write: (a) then a vectorized row-broadcast add kernel.
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
#include "device_fill.h"
#include "formats/bf16.h"
#include "formats/e4m3.h"
#include "gemm/fp8/variants.h"
#include "lowbit/device.h"
#include "lowbit/patch_embed.h"
#include "reference/reference_gemm.h"
#include "row_bcast_add.h"
#include "timing.h"

namespace lowbit::bench {

Status run_patch_embed_shape(const Options& opt, const Shape& sh, Result* r) {
  r->shape = sh;
  const int64_t m = sh.m, n = sh.n, k = sh.k, P = sh.period;
  OwnedStream stream;
  LOWBIT_RETURN_IF_ERROR(stream.create());
  cudaStream_t s = stream.s;

  // Operands are far larger than L2 (A alone is m*k bytes), so one set suffices.
  DeviceBuffer A, B, D, Dl, Du, bias, pos, scales, ws;
  LOWBIT_RETURN_IF_ERROR(A.alloc(m * k));
  LOWBIT_RETURN_IF_ERROR(B.alloc(n * k));
  LOWBIT_RETURN_IF_ERROR(D.alloc(m * n * 2));
  LOWBIT_RETURN_IF_ERROR(Dl.alloc(m * n * 2));
  LOWBIT_RETURN_IF_ERROR(Du.alloc(m * n * 2));
  LOWBIT_RETURN_IF_ERROR(bias.alloc(n * 2));
  LOWBIT_RETURN_IF_ERROR(pos.alloc(P * n * 2));
  LOWBIT_RETURN_IF_ERROR(scales.alloc(512));
  const uint64_t seed = opt.seed;
  LOWBIT_RETURN_IF_ERROR(cuda_status(fill_e4m3_uniform(A.p, m * k, 4.0f, seed * 1000 + 11, s), "fill A"));
  LOWBIT_RETURN_IF_ERROR(cuda_status(fill_e4m3_uniform(B.p, n * k, 4.0f, seed * 1000 + 12, s), "fill B"));
  LOWBIT_RETURN_IF_ERROR(cuda_status(fill_bf16_uniform(bias.p, n, 1.0f, seed * 1000 + 13, s), "fill bias"));
  LOWBIT_RETURN_IF_ERROR(cuda_status(fill_bf16_uniform(pos.p, P * n, 1.0f, seed * 1000 + 14, s), "fill pos"));
  const float h_scales[2] = {0.0625f, 0.03125f};
  float* d_sa = static_cast<float*>(scales.p);
  float* d_sb = d_sa + 64;
  LOWBIT_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(d_sa, &h_scales[0], 4, cudaMemcpyHostToDevice, s), "scales"));
  LOWBIT_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(d_sb, &h_scales[1], 4, cudaMemcpyHostToDevice, s), "scales"));

  std::vector<Fp8GemmConfig> cfgs;
  size_t ws_bytes = 0;
  LOWBIT_RETURN_IF_ERROR(resolve_configs(opt, m, n, k, &cfgs, &ws_bytes, Fp8EpilogueKind::kFused, P));
  LOWBIT_RETURN_IF_ERROR(ws.alloc(ws_bytes));
  LOWBIT_RETURN_IF_ERROR(workspace_init(ws.p, ws_bytes, s));
  r->config = cfgs[0].to_string();
  // The config's stages are the plain kernel's; the fused one gives some up for its staged rows.
  if (cfgs[0].resident_rows)
    r->config += " (fused, resident rows: " +
                 std::to_string(fp8::fp8_stages_for(cfgs[0].block_n, true, 128, fp8::kFp8ResidentMaxRows)) + " stages)";
  else
    for (const auto& v : fp8::kFp8Variants)
      if (v.block_m == cfgs[0].block_m && v.block_n == cfgs[0].block_n)
        r->config += " (fused: " + std::to_string(v.fused_stages) + " stages)";
  if (opt.explain) std::printf("%s", explain_fp8_config(m, n, k).c_str());

  auto fused = [&](const Fp8GemmConfig& c, cudaStream_t st) {
    PatchEmbedArgs a;
    a.m = m;
    a.n = n;
    a.k = k;
    a.patches = A.p;
    a.weight = B.p;
    a.bias = bias.p;
    a.bias_len = n;
    a.pos = pos.p;
    a.pos_rows = P;
    a.pos_cols = n;
    a.out = D.p;
    a.patches_scale = d_sa;
    a.weight_scale = d_sb;
    a.workspace = ws.p;
    a.workspace_bytes = ws_bytes;
    return patch_embed_fp8(a, st, &c);
  };
  CublasLtFp8 lt;
  LOWBIT_RETURN_IF_ERROR(lt.plan(m, n, k, OutType::kBF16, true, d_sa, d_sb));
  auto gemm_bias = [&](cudaStream_t st, void* out) { return lt.run(A.p, B.p, out, bias.p, 1.0f, st); };
  auto unfused = [&](cudaStream_t st) {
    LOWBIT_RETURN_IF_ERROR(gemm_bias(st, Du.p));
    return cuda_status(row_bcast_add_bf16(Du.p, pos.p, m, n, P, st), "row_bcast_add");
  };

  // Correctness: poison, run each once, compare sampled elements with the FP64 reference.
  for (void* out : {D.p, Dl.p, Du.p}) LOWBIT_RETURN_IF_ERROR(cuda_status(fill_u16(out, m * n, 0xFFFF, s), "poison"));
  LOWBIT_RETURN_IF_ERROR(fused(cfgs[0], s));
  LOWBIT_RETURN_IF_ERROR(gemm_bias(s, Dl.p));
  LOWBIT_RETURN_IF_ERROR(unfused(s));
  LOWBIT_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(s), "run"));
  {
    std::vector<uint8_t> ha(m * k), hb(n * k);
    std::vector<uint16_t> hd(m * n), hu(m * n), hbias(n), hpos(P * n);
    cudaMemcpy(ha.data(), A.p, ha.size(), cudaMemcpyDeviceToHost);
    cudaMemcpy(hb.data(), B.p, hb.size(), cudaMemcpyDeviceToHost);
    cudaMemcpy(hd.data(), D.p, hd.size() * 2, cudaMemcpyDeviceToHost);
    cudaMemcpy(hu.data(), Du.p, hu.size() * 2, cudaMemcpyDeviceToHost);
    cudaMemcpy(hbias.data(), bias.p, n * 2, cudaMemcpyDeviceToHost);
    cudaMemcpy(hpos.data(), pos.p, P * n * 2, cudaMemcpyDeviceToHost);
    LOWBIT_RETURN_IF_ERROR(cuda_status(cudaGetLastError(), "copy back"));
    int64_t unwritten = 0;
    for (size_t i = 0; i < hd.size(); ++i)
      if (!std::isfinite(formats::bf16_to_float(hd[i]))) ++unwritten;
    float lut[256];
    for (int c = 0; c < 256; ++c) lut[c] = formats::e4m3_to_float(static_cast<uint8_t>(c));
    std::mt19937_64 rng(seed ^ 0x7A7C);
    std::vector<double> ref, got, gotu;
    std::vector<int64_t> sampled;
    for (int t = 0; t < 2048; ++t) {
      const int64_t i = static_cast<int64_t>(rng() % m), j = static_cast<int64_t>(rng() % n);
      double acc = 0.0;
      for (int64_t q = 0; q < k; ++q) acc += static_cast<double>(lut[ha[i * k + q]]) * lut[hb[j * k + q]];
      acc = acc * h_scales[0] * h_scales[1] + formats::bf16_to_float(hbias[j]) +
            formats::bf16_to_float(hpos[(i % P) * n + j]);
      ref.push_back(acc);
      sampled.push_back(i * n + j);
      got.push_back(formats::bf16_to_float(hd[i * n + j]));
      gotu.push_back(formats::bf16_to_float(hu[i * n + j]));
    }
    const auto e = reference::compare(ref, got);
    const auto eu = reference::compare(ref, gotu);
    r->err = e.rel_fro;
    r->max_err = e.max_rel;
    r->err_unfused = eu.rel_fro;
    if (unwritten > 0) r->status = "FAIL: " + std::to_string(unwritten) + " outputs not written";
    else if (e.nonfinite > 0) r->status = "FAIL: non-finite outputs";
    else if (e.rel_fro > eu.rel_fro) r->status = "FAIL: error above the unfused pipeline's";
    // Each --config alternate is timed too, so it is checked the same way.
    for (size_t c = 1; c < cfgs.size() && r->status.empty(); ++c) {
      const std::string what = "alt " + cfgs[c].to_string();
      int64_t alt_unwritten = 0;
      std::vector<double> gota;
      LOWBIT_RETURN_IF_ERROR(rerun_and_sample([&](cudaStream_t st) { return fused(cfgs[c], st); }, D.p, m * n,
                                              OutType::kBF16, sampled, s, &alt_unwritten, &gota));
      const auto ea = reference::compare(ref, gota);
      if (alt_unwritten > 0) r->status = "FAIL: " + what + ": " + std::to_string(alt_unwritten) + " outputs not written";
      else if (ea.nonfinite > 0) r->status = "FAIL: " + what + ": non-finite outputs";
      else if (ea.rel_fro > eu.rel_fro) r->status = "FAIL: " + what + ": error above the unfused pipeline's";
    }
  }
  std::printf("  W2 %lldx%lldx%lld P=%lld: lowbit %s | %s\n", (long long)m, (long long)n, (long long)k, (long long)P,
              cfgs[0].to_string().c_str(), lt.algo_note().c_str());

  std::vector<LaunchFn> launches = {
      [&](cudaStream_t st, int) { return fused(cfgs[0], st); },
      [&](cudaStream_t st, int) { return gemm_bias(st, Dl.p); },
      [&](cudaStream_t st, int) { return unfused(st); },
  };
  for (size_t c = 1; c < cfgs.size(); ++c)
    launches.push_back([&, c](cudaStream_t st, int) { return fused(cfgs[c], st); });
  double rough = 0.0;
  LOWBIT_RETURN_IF_ERROR(rough_time_us(launches[0], s, &rough));
  const int batch = std::clamp(static_cast<int>(2000.0 / std::max(rough, 1.0)), 3, 200);
  std::vector<Timing> t;
  LOWBIT_RETURN_IF_ERROR(time_graphs_interleaved(launches, s, batch, opt.samples, &t));
  for (size_t c = 1; c < cfgs.size(); ++c)
    std::printf("  alt %-44s %9.1f us  (%.3f x the reported config)\n", cfgs[c].to_string().c_str(),
                t[2 + c].median_us, t[0].median_us / t[2 + c].median_us);

  const double flops = 2.0 * m * n * k;
  const double bytes = static_cast<double>(m * k + n * k) + 2.0 * m * n + 2.0 * n + 2.0 * P * n;
  r->us = t[0].median_us;
  r->us_base = t[1].median_us;
  r->us_unfused = t[2].median_us;
  r->tflops = flops / (r->us * 1e6);
  r->gbs = bytes / (r->us * 1e3);
  r->floor_us = std::max(flops / (kPeakFp8Tflops * 1e6), bytes / (kCopyTBs * 1e6));
  r->pct_floor = 100.0 * r->floor_us / r->us;
  r->speedup = r->us_base / r->us;
  r->x_unfused = r->us_unfused / r->us;
  r->batch = batch;
  r->samples = opt.samples;
  if (r->status.empty()) r->status = "ok";
  return Status::Ok();
}

}  // namespace lowbit::bench
