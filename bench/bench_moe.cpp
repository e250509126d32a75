// W6, the fused FP8 MoE: lowbit's pipeline (atomic and deterministic modes) against the unfused
// 7-kernel pipeline with a plain grouped GEMM (bench/moe_unfused.h), same process, same inputs,
// graph replay. Per-stage times are differences of timed stage prefixes (route; route+layout;
// ...). Logits rotate over several sets so that small batches route to different experts on
// consecutive launches and their weights do not stay in L2.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <tuple>
#include <vector>

#include "bench.h"
#include "bench_util.h"
#include "device_fill.h"
#include "formats/bf16.h"
#include "formats/e4m3.h"
#include "formats/quantize.h"
#include "gemm/core/tail_plan.h"
#include "lowbit/device.h"
#include "lowbit/moe.h"
#include "moe_unfused.h"
#include "reference/reference_gemm.h"
#include "reference/reference_moe.h"
#include "timing.h"

namespace lowbit::bench {
namespace {

// Expert weights of one (E, N, K), made once per process and shared by the shapes that use them;
// the host copy (decoded) is made on first use by the reference.
struct Weights {
  DeviceBuffer w, scales;
  std::vector<float> host_w, host_scales;
};

Status weights_for(int E, int N, int K, uint64_t seed, Weights** out) {
  static std::map<std::tuple<int, int, int>, std::unique_ptr<Weights>> cache;
  auto& slot = cache[{E, N, K}];
  if (!slot) {
    cache.clear();  // one set alive at a time: 268 MB each at the seed's shape
    auto& fresh = cache[{E, N, K}];
    fresh = std::make_unique<Weights>();
    const size_t nw = static_cast<size_t>(E) * N * K, ns = static_cast<size_t>(E) * ((N + 127) / 128) * (K / 128);
    LOWBIT_RETURN_IF_ERROR(fresh->w.alloc(nw));
    LOWBIT_RETURN_IF_ERROR(fresh->scales.alloc(ns * 4));
    LOWBIT_RETURN_IF_ERROR(cuda_status(fill_e4m3_uniform(fresh->w.p, nw, 448.0f, seed, nullptr), "fill"));
    LOWBIT_RETURN_IF_ERROR(cuda_status(
        fill_f32_scales(static_cast<float*>(fresh->scales.p), ns, -12, -6, false, seed + 1, nullptr), "fill"));
    *out = fresh.get();
    return Status::Ok();
  }
  *out = slot.get();
  return Status::Ok();
}

Status decode_host(Weights& w, size_t nw, size_t ns) {
  if (!w.host_w.empty()) return Status::Ok();
  std::vector<uint8_t> codes(nw);
  LOWBIT_RETURN_IF_ERROR(cuda_status(cudaMemcpy(codes.data(), w.w.p, nw, cudaMemcpyDeviceToHost), "copy"));
  float lut[256];
  for (int c = 0; c < 256; ++c) lut[c] = formats::e4m3_to_float(static_cast<uint8_t>(c));
  w.host_w.resize(nw);
  for (size_t i = 0; i < nw; ++i) w.host_w[i] = lut[codes[i]];
  w.host_scales.resize(ns);
  return cuda_status(cudaMemcpy(w.host_scales.data(), w.scales.p, ns * 4, cudaMemcpyDeviceToHost), "copy");
}

}  // namespace

Status run_moe_shape(const Options& opt, const Shape& sh, Result* r) {
  r->shape = sh;
  DeviceInfo dev;
  LOWBIT_RETURN_IF_ERROR(query_device(&dev));
  const MoeShape s{static_cast<int>(sh.m), static_cast<int>(sh.n), static_cast<int>(sh.k), sh.experts, sh.top_k};
  const size_t nw = static_cast<size_t>(s.experts) * s.n * s.k;
  const size_t ns = static_cast<size_t>(s.experts) * ((s.n + 127) / 128) * (s.k / 128);
  Weights* wts = nullptr;
  LOWBIT_RETURN_IF_ERROR(weights_for(s.experts, s.n, s.k, opt.seed * 1000 + 600, &wts));

  OwnedStream stream;
  LOWBIT_RETURN_IF_ERROR(stream.create());
  cudaStream_t st = stream.s;
  const int sets = s.m <= 512 ? 16 : 2;
  std::vector<DeviceBuffer> logits(sets);
  std::mt19937_64 g(opt.seed * 1000 + 601);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> hl(static_cast<size_t>(s.m) * s.experts), hl0;  // hl0: set 0, for the routing check
  for (auto& b : logits) {
    for (auto& v : hl) v = normal(g);
    if (hl0.empty()) hl0 = hl;
    LOWBIT_RETURN_IF_ERROR(b.alloc(hl.size() * 4));
    LOWBIT_RETURN_IF_ERROR(cuda_status(cudaMemcpy(b.p, hl.data(), hl.size() * 4, cudaMemcpyHostToDevice), "copy"));
  }
  DeviceBuffer x, y, y_det, y_base, ws, ws_det, ws_base;
  LOWBIT_RETURN_IF_ERROR(x.alloc(static_cast<size_t>(s.m) * s.k * 2));
  LOWBIT_RETURN_IF_ERROR(
      cuda_status(fill_bf16_uniform(x.p, static_cast<size_t>(s.m) * s.k, 3.0f, opt.seed * 1000 + 602, nullptr), "fill"));
  const size_t y_bytes = static_cast<size_t>(s.m) * s.n * 4;
  LOWBIT_RETURN_IF_ERROR(y.alloc(y_bytes));
  LOWBIT_RETURN_IF_ERROR(y_det.alloc(y_bytes));
  LOWBIT_RETURN_IF_ERROR(y_base.alloc(y_bytes));
  const size_t ws_bytes = fused_moe_workspace_size(s, MoeReduce::kAtomic, OutType::kFP32);
  const size_t ws_det_bytes = fused_moe_workspace_size(s, MoeReduce::kDeterministic, OutType::kFP32);
  LOWBIT_RETURN_IF_ERROR(ws.alloc(ws_bytes));
  LOWBIT_RETURN_IF_ERROR(ws_det.alloc(ws_det_bytes));
  LOWBIT_RETURN_IF_ERROR(ws_base.alloc(ws_bytes));
  UnfusedMoe unfused;
  LOWBIT_RETURN_IF_ERROR(unfused.init(s));

  MoeConfig cfg{};
  if (!opt.config.empty()) LOWBIT_RETURN_IF_ERROR(parse_moe_config(opt.config, &cfg));
  std::string why;
  const MoeConfig chosen = moe_choose_config(s, MoeReduce::kAtomic, dev.sm_count, &cfg, &why);
  r->config = chosen.to_string();
  if (opt.explain) std::printf("W6 %dx%dx%d E=%d top%d: %s\n", s.m, s.n, s.k, s.experts, s.top_k, why.c_str());

  auto args_for = [&](int i, MoeReduce red, void* out) {
    FusedMoeArgs a;
    a.shape = s;
    a.logits = logits[i % sets].p;
    a.softcap = 30.0f;
    a.renormalize = true;
    a.x = x.p;
    a.w = wts->w.p;
    a.w_scales = static_cast<const float*>(wts->scales.p);
    a.y = out;
    a.y_type = OutType::kFP32;
    a.reduce = red;
    return a;
  };
  LaunchFn ours = [&](cudaStream_t q, int i) {
    return fused_moe_fp8(args_for(i, MoeReduce::kAtomic, y.p), ws.p, ws_bytes, q, &cfg);
  };
  // The call's first kernel without PDL: the headline, like for like with the baseline, whose
  // launches never start under the previous call's tail (Result::us; the default's time, whose
  // tiny path does start so, is Result::us_pdl_first).
  MoeConfig cfg_no_pdl = cfg;
  cfg_no_pdl.pdl_first = 0;
  LaunchFn ours_no_pdl = [&](cudaStream_t q, int i) {
    return fused_moe_fp8(args_for(i, MoeReduce::kAtomic, y.p), ws.p, ws_bytes, q, &cfg_no_pdl);
  };
  LaunchFn det = [&](cudaStream_t q, int i) {
    return fused_moe_fp8(args_for(i, MoeReduce::kDeterministic, y_det.p), ws_det.p, ws_det_bytes, q, &cfg);
  };
  LaunchFn base = [&](cudaStream_t q, int i) {
    return unfused.run(args_for(i, MoeReduce::kAtomic, y_base.p), ws_base.p, ws_bytes, q);
  };
  // Stage prefixes, each launched alone (without PDL): the pipeline's own stages. The tiny path
  // routes inside the GEMM and has no stages to time apart.
  const bool tiny = chosen.tiny == 1;
  const std::vector<MoeStage> order =
      tiny ? std::vector<MoeStage>{}
           : std::vector<MoeStage>{MoeStage::kRoute, MoeStage::kLayout, MoeStage::kQuantizeGather};
  auto prefix = [&](int stages) -> LaunchFn {
    return [&, stages](cudaStream_t q, int i) {
      const FusedMoeArgs a = args_for(i, MoeReduce::kAtomic, y.p);
      for (int j = 0; j < stages; ++j) LOWBIT_RETURN_IF_ERROR(moe_run_stage(order[j], a, ws.p, ws_bytes, q, &cfg));
      return Status::Ok();
    };
  };

  // Correctness on input set 0: the routing against the CPU router, then ours (both modes)
  // and the baseline against the FP64 reference on sampled tokens. Outputs poisoned first:
  // every pipeline must write (or zero) all of Y itself.
  for (DeviceBuffer* out : {&y, &y_det, &y_base})
    LOWBIT_RETURN_IF_ERROR(cuda_status(cudaMemsetAsync(out->p, 0xFF, y_bytes, st), "poison"));
  LOWBIT_RETURN_IF_ERROR(ours(st, 0));
  LOWBIT_RETURN_IF_ERROR(det(st, 0));
  LOWBIT_RETURN_IF_ERROR(base(st, 0));
  LOWBIT_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(st), "moe run"));
  LOWBIT_RETURN_IF_ERROR(moe_check_status(s, MoeReduce::kAtomic, OutType::kFP32, ws.p, ws_bytes, st));
  MoeWorkspaceView v;
  LOWBIT_RETURN_IF_ERROR(moe_workspace_view(s, MoeReduce::kAtomic, OutType::kFP32, ws.p, ws_bytes, &v));
  if (chosen.token_rows == 1) {
    // The GEMM's tiles and the layout stage's plan for their last partial wave (input set 0's
    // routing; the timed batches alternate sets): tile_start[experts], then gemm::TailPlan.
    int32_t plan[1 + gemm::kTailPlanInts] = {};
    LOWBIT_RETURN_IF_ERROR(
        cuda_status(cudaMemcpy(plan, v.tile_start + s.experts, sizeof(plan), cudaMemcpyDeviceToHost), "copy"));
    const int parts = plan[gemm::kTailPlanParts];
    r->config += " (set 0: " + std::to_string(plan[0]) + " tiles, the last " +
                 std::to_string(plan[0] - plan[gemm::kTailPlanWhole]) + " in " + std::to_string(parts) + " K part" +
                 (parts == 1 ? "" : "s") + ")";
  }
  const size_t pairs = static_cast<size_t>(s.m) * s.top_k;
  std::vector<int32_t> ids(pairs);
  std::vector<float> wt(pairs);
  LOWBIT_RETURN_IF_ERROR(cuda_status(cudaMemcpy(ids.data(), v.topk_ids, pairs * 4, cudaMemcpyDeviceToHost), "copy"));
  LOWBIT_RETURN_IF_ERROR(cuda_status(cudaMemcpy(wt.data(), v.topk_weights, pairs * 4, cudaMemcpyDeviceToHost), "copy"));
  {
    const reference::Routing rr = reference::route(hl0, s.m, s.experts, s.top_k, 30.0, true);
    const int64_t i = reference::first_routing_mismatch(rr, ids.data(), wt.data(), s.m, s.top_k, 1e-5);
    if (i >= 0)
      r->status = "WRONG ROUTING (token " + std::to_string(i / s.top_k) + " slot " + std::to_string(i % s.top_k) +
                  ": expert " + std::to_string(ids[i]) + " weight " + std::to_string(wt[i]) + ", CPU " +
                  std::to_string(rr.ids[i]) + " " + std::to_string(rr.weights[i]) + ")";
  }
  {
    LOWBIT_RETURN_IF_ERROR(decode_host(*wts, nw, ns));
    const int samples = std::min(s.m, 48);
    std::vector<uint16_t> hx(static_cast<size_t>(s.m) * s.k);
    LOWBIT_RETURN_IF_ERROR(cuda_status(cudaMemcpy(hx.data(), x.p, hx.size() * 2, cudaMemcpyDeviceToHost), "copy"));
    std::vector<float> xs(static_cast<size_t>(samples) * s.k);
    std::vector<int32_t> sid(static_cast<size_t>(samples) * s.top_k);
    std::vector<float> swt(sid.size());
    std::vector<int> tok(samples);
    for (int i = 0; i < samples; ++i) {
      tok[i] = static_cast<int>(static_cast<int64_t>(i) * s.m / samples);
      for (int c = 0; c < s.k; ++c) xs[static_cast<size_t>(i) * s.k + c] = formats::bf16_to_float(hx[static_cast<size_t>(tok[i]) * s.k + c]);
      for (int j = 0; j < s.top_k; ++j) {
        sid[i * s.top_k + j] = ids[static_cast<size_t>(tok[i]) * s.top_k + j];
        swt[i * s.top_k + j] = wt[static_cast<size_t>(tok[i]) * s.top_k + j];
      }
    }
    const formats::QuantizedRows q = formats::quantize_e4m3_rows_1x128(xs, samples, s.k);
    std::vector<float> xq(q.codes.size());
    for (size_t i = 0; i < xq.size(); ++i) xq[i] = formats::e4m3_to_float(q.codes[i]);
    reference::MoeProblem p;
    p.m = samples;
    p.n = s.n;
    p.k = s.k;
    p.experts = s.experts;
    p.top_k = s.top_k;
    p.xq = xq.data();
    p.x_scales = q.scales.data();
    p.w = wts->host_w.data();
    p.w_scales = wts->host_scales.data();
    p.ids = sid.data();
    p.weights = swt.data();
    const std::vector<double> ref = reference::moe_full(p);
    // The sampled tokens against the reference; every element of Y is scanned for the poison
    // (a pipeline that skipped whole tiles of unsampled tokens must not pass).
    int64_t unwritten = 0;
    auto sampled = [&](const DeviceBuffer& out) {
      std::vector<float> all(static_cast<size_t>(s.m) * s.n);
      cudaMemcpy(all.data(), out.p, y_bytes, cudaMemcpyDeviceToHost);
      for (float f : all)
        if (!std::isfinite(f)) ++unwritten;
      std::vector<double> got(ref.size());
      for (int i = 0; i < samples; ++i)
        for (int c = 0; c < s.n; ++c) got[static_cast<size_t>(i) * s.n + c] = all[static_cast<size_t>(tok[i]) * s.n + c];
      return got;
    };
    const std::vector<double> got = sampled(y), got_det = sampled(y_det);
    const int64_t ours_unwritten = unwritten;
    unwritten = 0;
    const std::vector<double> got_base = sampled(y_base);
    const int64_t base_unwritten = unwritten;
    // The headline launch (the first kernel without PDL) writes y too: poisoned and run again.
    LOWBIT_RETURN_IF_ERROR(cuda_status(cudaMemsetAsync(y.p, 0xFF, y_bytes, st), "poison"));
    LOWBIT_RETURN_IF_ERROR(ours_no_pdl(st, 0));
    LOWBIT_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(st), "moe run"));
    unwritten = 0;
    const std::vector<double> got_no_pdl = sampled(y);
    const int64_t no_pdl_unwritten = unwritten;
    const reference::ErrorStats e = reference::compare(ref, got), eb = reference::compare(ref, got_base),
                                ed = reference::compare(ref, got_det);
    if (r->status.empty() && ours_unwritten + no_pdl_unwritten > 0)
      r->status = "WRONG RESULT (" + std::to_string(ours_unwritten + no_pdl_unwritten) + " outputs unwritten or non-finite)";
    if (r->status.empty() && reference::similarity_diff(ref, got_no_pdl) > 1e-3)
      r->status = "WRONG RESULT (without the first kernel's PDL: similarity diff " +
                  std::to_string(reference::similarity_diff(ref, got_no_pdl)) + ")";
    r->err = e.rel_fro;
    r->max_err = e.max_rel;
    r->err_base = eb.rel_fro;
    r->max_err_base = eb.max_rel;
    r->similarity = reference::similarity_diff(ref, got);
    if (r->status.empty() &&
        (e.nonfinite || ed.nonfinite || r->similarity > 1e-3 || reference::similarity_diff(ref, got_det) > 1e-3))
      r->status = "WRONG RESULT (similarity diff " + std::to_string(r->similarity) + ")";
    if (r->status.empty() && (eb.nonfinite || base_unwritten || reference::similarity_diff(ref, got_base) > 1e-3))
      r->status = "baseline unavailable: the unfused pipeline's output is wrong";
  }

  double rough = 0.0;
  LOWBIT_RETURN_IF_ERROR(rough_time_us(ours, st, &rough));
  const int batch = std::clamp(static_cast<int>(3000.0 / std::max(rough, 1.0)), 2, 200);
  std::vector<LaunchFn> launches = {ours, det, ours_no_pdl};
  constexpr size_t kPrefixAt = 3;
  for (size_t j = 1; j <= order.size(); ++j) launches.push_back(prefix(static_cast<int>(j)));
  const size_t base_at = launches.size();
  if (opt.baseline) launches.push_back(base);
  std::vector<Timing> t;
  LOWBIT_RETURN_IF_ERROR(time_graphs_interleaved(launches, st, batch, opt.samples, &t));

  // Floor: every touched expert's weights and scales read once, X and logits read, Y written.
  std::vector<char> touched(s.experts, 0);
  for (int32_t e : ids) touched[e] = 1;
  const double active = static_cast<double>(std::count(touched.begin(), touched.end(), 1));
  const double bytes = active * s.n * s.k + active * ns / s.experts * 4 + static_cast<double>(s.m) * s.k * 2 +
                       static_cast<double>(s.m) * s.experts * 4 + static_cast<double>(s.m) * s.n * 4;
  const double flops = 2.0 * pairs * s.n * s.k;
  r->us = t[2].median_us;
  r->us_pdl_first = t[0].median_us;
  r->us_det = t[1].median_us;
  if (tiny)
    r->stages = {};
  else
    r->stages = {{"route", t[kPrefixAt].median_us},
                 {"layout", t[kPrefixAt + 1].median_us - t[kPrefixAt].median_us},
                 {"gather", t[kPrefixAt + 2].median_us - t[kPrefixAt + 1].median_us},
                 {"gemm", t[2].median_us - t[kPrefixAt + 2].median_us}};
  r->us_base = opt.baseline ? t[base_at].median_us : 0.0;
  r->tflops = flops / (r->us * 1e6);
  r->gbs = bytes / (r->us * 1e3);
  r->floor_us = std::max(flops / (kPeakFp8Tflops * 1e6), bytes / (kCopyTBs * 1e6));
  r->pct_floor = 100.0 * r->floor_us / r->us;
  r->speedup = r->us_base > 0 ? r->us_base / r->us : 0.0;
  r->batch = batch;
  r->samples = opt.samples;
  if (r->status.empty()) r->status = "ok";
  return Status::Ok();
}

}  // namespace lowbit::bench
