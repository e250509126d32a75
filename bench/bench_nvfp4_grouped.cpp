// W5: grouped NVFP4 GEMM (seed 001's shapes): our grouped call (prepare, activation pass, one
// persistent GEMM launch) against our single-problem NVFP4 GEMM launched once per group, same
// process, same inputs, both NVFP4 x NVFP4; the grouped W4A16 path alongside. Weights are random
// NVFP4 bytes and E4M3 scales generated on the device and prepacked once (load time, not timed);
// input sets rotate past 2x L2.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "bench.h"
#include "bench_util.h"
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

constexpr int kScaleLo = 0x30, kScaleHi = 0x40;  // E4M3 0.5 .. 2
constexpr float kGlobalA = 0.02f, kGlobalB = 0.005f;

struct GroupBuffers {
  DeviceBuffer w, a4, a4s, abf, d;
};

struct InputSet {
  std::vector<GroupBuffers> g;
  DeviceBuffer problems, problems_bf16;  // device descriptors: NVFP4 and BF16 activations
};

uint64_t group_seed(uint64_t seed, int set, int g) { return seed + 1000 * set + 10 * g; }

}  // namespace

Status run_nvfp4_grouped_shape(const Options& opt, const Shape& sh, Result* r) {
  r->shape = sh;
  DeviceInfo dev;
  LOWBIT_RETURN_IF_ERROR(query_device(&dev));
  const std::vector<int64_t>& ms = sh.group_m;
  const int G = static_cast<int>(ms.size());
  const int64_t n = sh.n, k = sh.k;
  int64_t total_m = 0;
  for (int64_t m : ms) total_m += m;
  const size_t w_bytes = static_cast<size_t>(n * k / 2), ws_scale = static_cast<size_t>(n * k / 16);
  const size_t pre_bytes = nvfp4_prepacked_bytes(n, k);
  // Counted for the smallest reader: ours with NVFP4 activations (4.5 bits per element).
  const int sets = rotation_sets(dev.l2_bytes, G * pre_bytes + static_cast<size_t>(total_m * k * 9 / 16), 16);

  OwnedStream stream;
  LOWBIT_RETURN_IF_ERROR(stream.create());
  cudaStream_t s = stream.s;
  const uint64_t seed = opt.seed * 1000 + 99;
  DeviceBuffer wpacked, wscales;
  LOWBIT_RETURN_IF_ERROR(wpacked.alloc(w_bytes));
  LOWBIT_RETURN_IF_ERROR(wscales.alloc(ws_scale));
  auto fill_weights = [&](uint64_t gs) -> Status {
    LOWBIT_RETURN_IF_ERROR(cuda_status(fill_u8_range(wpacked.p, w_bytes, 0, 255, gs, s), "fill W"));
    return cuda_status(fill_u8_range(wscales.p, ws_scale, kScaleLo, kScaleHi, gs + 1, s), "fill W scales");
  };
  std::vector<InputSet> in(sets);
  for (int i = 0; i < sets; ++i) {
    in[i].g.resize(G);
    std::vector<Nvfp4GroupedProblem> h(G), hb(G);
    for (int g = 0; g < G; ++g) {
      GroupBuffers& b = in[i].g[g];
      const int64_t m = ms[g];
      const uint64_t gs = group_seed(seed, i, g);
      LOWBIT_RETURN_IF_ERROR(fill_weights(gs));
      LOWBIT_RETURN_IF_ERROR(b.w.alloc(pre_bytes));
      Nvfp4PrepackArgs pa;
      pa.n = n;
      pa.k = k;
      pa.packed = wpacked.p;
      pa.scales = wscales.p;
      pa.out = b.w.p;
      pa.out_bytes = pre_bytes;
      LOWBIT_RETURN_IF_ERROR(nvfp4_prepack_weights(pa, s));
      LOWBIT_RETURN_IF_ERROR(b.a4.alloc(static_cast<size_t>(m * k / 2)));
      LOWBIT_RETURN_IF_ERROR(b.a4s.alloc(static_cast<size_t>(m * k / 16)));
      LOWBIT_RETURN_IF_ERROR(b.abf.alloc(static_cast<size_t>(m * k * 2)));
      LOWBIT_RETURN_IF_ERROR(b.d.alloc(static_cast<size_t>(m * n * 2)));
      LOWBIT_RETURN_IF_ERROR(cuda_status(fill_u8_range(b.a4.p, m * k / 2, 0, 255, gs + 2, s), "fill A"));
      LOWBIT_RETURN_IF_ERROR(cuda_status(fill_u8_range(b.a4s.p, m * k / 16, kScaleLo, kScaleHi, gs + 3, s), "fill A scales"));
      LOWBIT_RETURN_IF_ERROR(cuda_status(fill_bf16_uniform(b.abf.p, m * k, 1.0f, gs + 4, s), "fill A bf16"));
      Nvfp4GroupedProblem p{};
      p.m = static_cast<int32_t>(m);
      p.n = static_cast<int32_t>(n);
      p.k = static_cast<int32_t>(k);
      p.a = b.a4.p;
      p.a_scales = b.a4s.p;
      p.b_prepacked = b.w.p;
      p.d = b.d.p;
      p.a_global_scale = kGlobalA;
      p.b_global_scale = kGlobalB;
      h[g] = p;
      p.a = b.abf.p;
      p.a_scales = nullptr;
      hb[g] = p;
    }
    LOWBIT_RETURN_IF_ERROR(in[i].problems.alloc(sizeof(Nvfp4GroupedProblem) * G));
    LOWBIT_RETURN_IF_ERROR(in[i].problems_bf16.alloc(sizeof(Nvfp4GroupedProblem) * G));
    LOWBIT_RETURN_IF_ERROR(cuda_status(
        cudaMemcpyAsync(in[i].problems.p, h.data(), sizeof(Nvfp4GroupedProblem) * G, cudaMemcpyHostToDevice, s), "desc"));
    LOWBIT_RETURN_IF_ERROR(cuda_status(
        cudaMemcpyAsync(in[i].problems_bf16.p, hb.data(), sizeof(Nvfp4GroupedProblem) * G, cudaMemcpyHostToDevice, s),
        "desc"));
    LOWBIT_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(s), "upload"));  // h, hb go out of scope
  }

  // Configs: [0] reported (forced or chosen), then --alt.
  Nvfp4GroupedArgs base_args;
  base_args.groups = G;
  base_args.max_activation_elements = total_m * k;
  base_args.expected_m = total_m / G;
  std::vector<Nvfp4GemmConfig> cfgs;
  LOWBIT_RETURN_IF_ERROR(config_list(
      opt, parse_nvfp4_config, [&](Nvfp4GemmConfig* c) { return choose_nvfp4_grouped_config(base_args, c); }, &cfgs));
  const size_t ws_bytes = nvfp4_grouped_workspace_size(G, total_m * k);
  DeviceBuffer ws;
  LOWBIT_RETURN_IF_ERROR(ws.alloc(ws_bytes));
  r->config = cfgs[0].to_string();
  if (opt.explain) std::printf("  nvfp4 grouped G=%d N=%lld K=%lld: %s\n", G, (long long)n, (long long)k, cfgs[0].reason.c_str());

  auto run_cfg = [&](const Nvfp4GemmConfig& c, bool fp4_act, cudaStream_t st, int i, bool pdl_first = true) {
    Nvfp4GroupedArgs a = base_args;
    a.pdl_first = pdl_first;
    const InputSet& set = in[i % sets];
    a.problems = static_cast<const Nvfp4GroupedProblem*>(fp4_act ? set.problems.p : set.problems_bf16.p);
    a.nvfp4_activations = fp4_act;
    a.workspace = ws.p;
    a.workspace_bytes = ws_bytes;
    return nvfp4_grouped_gemm(a, st, &c);
  };
  auto ours = [&](cudaStream_t st, int i) { return run_cfg(cfgs[0], true, st, i); };
  auto ours_w4a16 = [&](cudaStream_t st, int i) { return run_cfg(cfgs[0], false, st, i); };
  // In a batch our first kernel may start under the previous call's tail (PDL); the loop's
  // launches may not. Timed both ways: without it is the headline, like for like (Result::us),
  // the default with it is Result::us_pdl_first.
  auto ours_no_pdl = [&](cudaStream_t st, int i) { return run_cfg(cfgs[0], true, st, i, false); };

  // The baseline: our single-problem kernel once per group, each with its own chosen config, all
  // sharing one workspace (they run one after another on the stream).
  std::vector<Nvfp4GemmConfig> loop_cfg(G);
  size_t loop_ws_bytes = 0;
  for (int g = 0; g < G; ++g) {
    LOWBIT_RETURN_IF_ERROR(choose_nvfp4_config(ms[g], n, k, &loop_cfg[g]));
    loop_ws_bytes = std::max(loop_ws_bytes, nvfp4_gemm_workspace_size(ms[g], n, k, true, loop_cfg[g]));
  }
  DeviceBuffer loop_ws;
  LOWBIT_RETURN_IF_ERROR(loop_ws.alloc(loop_ws_bytes));
  LOWBIT_RETURN_IF_ERROR(workspace_init(loop_ws.p, loop_ws_bytes, s));
  auto loop = [&](cudaStream_t st, int i) -> Status {
    const InputSet& set = in[i % sets];
    for (int g = 0; g < G; ++g) {
      Nvfp4GemmArgs a;
      a.m = ms[g];
      a.n = n;
      a.k = k;
      a.a_packed = set.g[g].a4.p;
      a.a_scales = set.g[g].a4s.p;
      a.a_global_scale = kGlobalA;
      a.b_prepacked = set.g[g].w.p;
      a.b_global_scale = kGlobalB;
      a.d = set.g[g].d.p;
      a.workspace = loop_ws.p;
      a.workspace_bytes = loop_ws_bytes;
      LOWBIT_RETURN_IF_ERROR(nvfp4_gemm(a, st, &loop_cfg[g]));
    }
    return Status::Ok();
  };

  // Correctness on set 0: poison every D, run once, check the status word and sampled outputs of
  // every group against the FP64 reference (the weights' source bytes are regenerated per group).
  // Every path that is timed is checked: the reported config with NVFP4 activations (its error
  // is the row's), with BF16 activations (W4A16), without the first kernel's PDL, and each --alt.
  struct HostGroup {
    std::vector<uint8_t> wp, wsc, ap, asc;
    std::vector<uint16_t> abf;
  };
  std::vector<HostGroup> host(G);
  for (int g = 0; g < G; ++g) {
    const int64_t m = ms[g];
    HostGroup& h = host[g];
    LOWBIT_RETURN_IF_ERROR(fill_weights(group_seed(seed, 0, g)));
    LOWBIT_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(s), "regenerate"));
    h.wp.resize(w_bytes);
    h.wsc.resize(ws_scale);
    h.ap.resize(static_cast<size_t>(m * k / 2));
    h.asc.resize(static_cast<size_t>(m * k / 16));
    h.abf.resize(static_cast<size_t>(m * k));
    cudaMemcpy(h.wp.data(), wpacked.p, h.wp.size(), cudaMemcpyDeviceToHost);
    cudaMemcpy(h.wsc.data(), wscales.p, h.wsc.size(), cudaMemcpyDeviceToHost);
    cudaMemcpy(h.ap.data(), in[0].g[g].a4.p, h.ap.size(), cudaMemcpyDeviceToHost);
    cudaMemcpy(h.asc.data(), in[0].g[g].a4s.p, h.asc.size(), cudaMemcpyDeviceToHost);
    cudaMemcpy(h.abf.data(), in[0].g[g].abf.p, h.abf.size() * 2, cudaMemcpyDeviceToHost);
    LOWBIT_RETURN_IF_ERROR(cuda_status(cudaGetLastError(), "copy back"));
  }
  auto check = [&](const LaunchFn& launch, bool fp4_act, const std::string& what) -> Status {
    for (int g = 0; g < G; ++g)
      LOWBIT_RETURN_IF_ERROR(cuda_status(fill_u16(in[0].g[g].d.p, ms[g] * n, 0xFFFF, s), "poison"));
    LOWBIT_RETURN_IF_ERROR(launch(s, 0));
    LOWBIT_RETURN_IF_ERROR(nvfp4_grouped_check_status(ws.p, s));
    std::vector<double> ref, got;
    int64_t unwritten = 0;
    for (int g = 0; g < G; ++g) {
      const int64_t m = ms[g];
      const HostGroup& h = host[g];
      std::vector<uint16_t> hd(static_cast<size_t>(m * n));
      LOWBIT_RETURN_IF_ERROR(
          cuda_status(cudaMemcpy(hd.data(), in[0].g[g].d.p, hd.size() * 2, cudaMemcpyDeviceToHost), "copy D"));
      unwritten += count_nonfinite_bf16(hd);
      if (fp4_act)
        sample_nvfp4_outputs(h.ap, h.asc, h.wp, h.wsc, hd, m, n, k, static_cast<double>(kGlobalA) * kGlobalB, 128,
                             seed ^ (0x5EED + g), &ref, &got);
      else
        sample_w4a16_outputs(h.abf, h.wp, h.wsc, hd, m, n, k, kGlobalB, 128, seed ^ (0xA16 + g), &ref, &got);
    }
    nvfp4_verdict(ref, got, unwritten, r, what);
    return Status::Ok();
  };
  LOWBIT_RETURN_IF_ERROR(check(ours, true, ""));
  LOWBIT_RETURN_IF_ERROR(check(ours_w4a16, false, "W4A16"));
  LOWBIT_RETURN_IF_ERROR(check(ours_no_pdl, true, "without the first kernel's PDL"));
  if (opt.baseline) LOWBIT_RETURN_IF_ERROR(check(loop, true, "per-group loop"));  // the row's baseline
  for (size_t c = 1; c < cfgs.size(); ++c)
    LOWBIT_RETURN_IF_ERROR(check([&, c](cudaStream_t st, int i) { return run_cfg(cfgs[c], true, st, i); }, true,
                                 "alt " + cfgs[c].to_string()));

  double rough = 0.0;
  LOWBIT_RETURN_IF_ERROR(rough_time_us(ours, s, &rough));
  const int batch = std::clamp(static_cast<int>(2000.0 / std::max(rough, 1.0)), 3, 200);
  std::vector<LaunchFn> launches = {ours, ours_w4a16, ours_no_pdl};
  int i_loop = -1;
  if (opt.baseline) {
    i_loop = static_cast<int>(launches.size());
    launches.push_back(loop);
  }
  std::vector<Timing> t;
  LOWBIT_RETURN_IF_ERROR(time_with_alt_configs(
      launches, cfgs, [&](const Nvfp4GemmConfig& c, cudaStream_t st, int i) { return run_cfg(c, true, st, i); }, s,
      batch, opt.samples, &t));

  const double flops = 2.0 * total_m * n * k;
  // workloads.md's W5 bytes: every group's NVFP4 weights and scales, NVFP4 activations and
  // scales, BF16 output.
  const double bytes = G * (static_cast<double>(n * k) / 2 + static_cast<double>(n * k) / 16) +
                       static_cast<double>(total_m * k) / 2 + static_cast<double>(total_m * k) / 16 +
                       static_cast<double>(total_m * n) * 2;
  r->us = t[2].median_us;
  r->us_pdl_first = t[0].median_us;
  r->us_w4a16 = t[1].median_us;
  r->us_loop = i_loop >= 0 ? t[i_loop].median_us : 0.0;
  r->x_loop = r->us_loop > 0 ? r->us_loop / r->us : 0.0;
  r->us_base = r->us_loop;  // the suite's baseline
  r->speedup = r->x_loop;
  r->tflops = flops / (r->us * 1e6);
  r->gbs = bytes / (r->us * 1e3);
  // workloads.md's floor (bytes-bound on every W5 set); the exact kernel's BF16-rate MMA floor apart.
  r->floor_us = std::max(bytes / (kCopyTBs * 1e6), flops / (kPeakFp8Tflops * 1e6));
  r->compute_floor_us = flops / (kPeakBf16Tflops * 1e6);
  r->pct_floor = 100.0 * r->floor_us / r->us;
  r->batch = batch;
  r->samples = opt.samples;
  if (r->status.empty()) r->status = "ok";
  return Status::Ok();
}

}  // namespace lowbit::bench
