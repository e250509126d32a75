// lowbit-bench --host-overhead: host microseconds per eager call (no graph, no synchronization in
// the loop), the time an engine without CUDA graphs pays per layer on the CPU, argument checks and
// config choice included. Each call is made 400 times in a round, 30 rounds with every row in each;
// the median round's mean is reported. The GPU runs the calls meanwhile; the queue never fills at
// 400.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "bench.h"
#include "common/arg_check.h"
#include "device_fill.h"
#include "hopper/tensor_map.h"
#include "launch_floor.h"
#include "lowbit/lowbit.h"

namespace lowbit::bench {
namespace {

struct Row {
  const char* what;
  std::function<Status()> call;
};

// Host us per call of each row: rounds of 400 calls, the rows one after another within a round
// (so a slower stretch of the host's clock hits every row alike), the median round per row; round
// 0 warms up. -1 where a call failed (failures[i] says why).
std::vector<double> per_call_us(const std::vector<Row>& rows, std::vector<Status>* failures) {
  constexpr int kRounds = 31, kCalls = 400;
  std::vector<std::vector<double>> samples(rows.size());
  std::vector<bool> failed(rows.size(), false);
  failures->assign(rows.size(), Status::Ok());
  for (int r = 0; r < kRounds; ++r)
    for (size_t i = 0; i < rows.size(); ++i) {
      if (failed[i]) continue;
      cudaDeviceSynchronize();
      const auto t0 = std::chrono::steady_clock::now();
      for (int c = 0; c < kCalls && !failed[i]; ++c) {
        const Status st = rows[i].call();
        if (!st.ok()) {
          (*failures)[i] = st;
          failed[i] = true;
        }
      }
      const auto t1 = std::chrono::steady_clock::now();
      if (r > 0) samples[i].push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / kCalls);
    }
  cudaDeviceSynchronize();
  std::vector<double> us(rows.size(), -1.0);
  for (size_t i = 0; i < rows.size(); ++i) {
    if (failed[i]) continue;
    std::sort(samples[i].begin(), samples[i].end());
    us[i] = samples[i][samples[i].size() / 2];
  }
  return us;
}

Status status_of(cudaError_t e) {
  return e == cudaSuccess ? Status::Ok() : Status::Error(StatusCode::kCudaError, cudaGetErrorString(e));
}

struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(size_t bytes) { cudaMalloc(&p, bytes); }
  ~DeviceBuffer() { cudaFree(p); }
};

}  // namespace

int run_host_overhead(int64_t m, int64_t n, int64_t k, double target_us) {
  Status st = require_hopper();
  if (!st.ok()) {
    std::fprintf(stderr, "lowbit-bench --host-overhead: %s\n", st.to_string().c_str());
    return 1;
  }
  const int64_t kb = (k + 127) / 128, nb = (n + 127) / 128;
  DeviceBuffer a(m * k * 2 + 256), b(n * k), d(m * n * 4 + 256), ws(64 << 20), sfa(kb * ((m + 3) / 4 * 4) * 4),
      sfb(nb * kb * 4), pre(nvfp4_prepacked_bytes(n, k));
  fill_e4m3_int(a.p, m * k, 2, 1, nullptr);
  fill_e4m3_int(b.p, n * k, 2, 2, nullptr);
  fill_f32_scales(static_cast<float*>(sfa.p), kb * ((m + 3) / 4 * 4), 0, 0, true, 3, nullptr);
  fill_f32_scales(static_cast<float*>(sfb.p), nb * kb, 0, 0, true, 4, nullptr);
  cudaMemset(pre.p, 0, nvfp4_prepacked_bytes(n, k));
  workspace_init(ws.p, 64 << 20, nullptr);
  cudaStream_t s = nullptr;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);

  Fp8GemmArgs g;
  g.m = m;
  g.n = n;
  g.k = k;
  g.a = a.p;
  g.b = b.p;
  g.d = d.p;
  g.workspace = ws.p;
  g.workspace_bytes = 64 << 20;
  Fp8GemmConfig forced;
  choose_fp8_config(m, n, k, &forced);
  Fp8BlockScaledArgs x;
  x.m = m;
  x.n = n;
  x.k = k;
  x.a = a.p;
  x.b = b.p;
  x.d = d.p;
  x.sfa = static_cast<const float*>(sfa.p);
  x.sfa_ld = (m + 3) / 4 * 4;
  x.sfb = static_cast<const float*>(sfb.p);
  Nvfp4GemmArgs v;
  v.m = m;
  v.n = n;
  v.k = k;
  v.a_bf16 = a.p;
  v.b_prepacked = pre.p;
  v.d = d.p;
  v.workspace = ws.p;
  v.workspace_bytes = 64 << 20;

  const std::vector<Row> rows = {
      {"fp8_gemm (chooser, memoized)", [&] { return fp8_gemm(g, s); }},
      {"fp8_gemm (forced config)", [&] { return fp8_gemm(g, s, &forced); }},
      {"fp8_blockscaled_gemm", [&] { return fp8_blockscaled_gemm(x, s); }},
      {"nvfp4_gemm (BF16 activations)", [&] { return nvfp4_gemm(v, s); }},
  };
  // What a call is made of: the launch itself, one pointer-kind check (common/arg_check.h), one
  // tensor map encoded by the driver and one from lowbit's per-thread cache (hopper/tensor_map.h).
  int device = 0;
  cudaGetDevice(&device);
  const hopper::TensorMap2dSpec spec = hopper::dense_2d(b.p, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, n, k, 128, 128);
  CUtensorMap map;
  const std::vector<Row> parts = {
      {"runtime launch, same params", [&] { return status_of(launch_empty_like_gemm(s)); }},
      {"floor: lowbit's launch, same params", [&] { return status_of(launch_empty_like_gemm_lowbit(s)); }},
      {"driver launch, same params", [&] { return status_of(launch_empty_like_gemm_driver(s)); }},
      {"driver launch, one pointer", [&] { return status_of(launch_empty_one_pointer_driver(s)); }},
      {"part: one pointer-kind check", [&] { return check::device_accessible("bench", "A", a.p, device); }},
      {"part: cuTensorMapEncodeTiled", [&] { return hopper::encode_tensor_map_2d(spec, &map); }},
      {"part: tensor map from the cache", [&] { return hopper::make_tensor_map_2d(spec, &map); }},
  };
  std::printf("host us per eager call, %lldx%lldx%lld (target <= %.1f us)\n", static_cast<long long>(m),
              static_cast<long long>(n), static_cast<long long>(k), target_us);
  std::vector<Row> all = rows;
  all.insert(all.end(), parts.begin(), parts.end());
  std::vector<Status> failures;
  const std::vector<double> us = per_call_us(all, &failures);
  const double floor_us = us[rows.size() + 1];  // lowbit's own launch of the empty kernel (-1: failed)
  int rc = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    if (us[i] < 0) {
      std::printf("  %-36s FAILED: %s\n", all[i].what, failures[i].to_string().c_str());
      rc = 1;
    } else if (i < rows.size()) {
      char above[48] = "";
      if (floor_us > 0) std::snprintf(above, sizeof(above), " (%.2f above the floor)", us[i] - floor_us);
      std::printf("  %-36s %6.2f us%s%s\n", all[i].what, us[i], above, us[i] <= target_us ? "" : " (over the target)");
    } else {
      std::printf("  %-36s %6.3f us\n", all[i].what, us[i]);
    }
  }
  cudaStreamDestroy(s);
  return rc;
}

}  // namespace lowbit::bench
