// What the NVFP4 benches (W4, W5) share: the correctness check -- sampled outputs of
// D = g_a g_b A W^T (A [m, k] and W [n, k] raw NVFP4 bytes with row-major E4M3 scales, as
// generated) against the FP64 reference, and the verdict written into the result -- and timing
// the --alt configs beside the rest.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bench.h"
#include "formats/bf16.h"
#include "formats/nvfp4.h"
#include "lowbit/nvfp4.h"
#include "reference/reference_gemm.h"
#include "timing.h"

namespace lowbit::bench {

inline double nvfp4_value(const std::vector<uint8_t>& packed, const std::vector<uint8_t>& scales, int64_t row,
                          int64_t col, int64_t k) {
  const uint8_t byte = packed[static_cast<size_t>(row * (k / 2) + col / 2)];
  return static_cast<double>(formats::e2m1_to_float(col % 2 ? byte >> 4 : byte & 0xF)) *
         formats::nvfp4_scale_to_float(scales[static_cast<size_t>(row * (k / 16) + col / 16)]);
}

// Appends `samples` random (i, j) outputs of the BF16 D [m, n] and their references, with A's
// values from `act(i, q)` (NVFP4 or BF16 activations).
template <class Act>
inline void sample_outputs(const Act& act, const std::vector<uint8_t>& wp, const std::vector<uint8_t>& wsc,
                           const std::vector<uint16_t>& d, int64_t m, int64_t n, int64_t k, double scale, int samples,
                           uint64_t seed, std::vector<double>* ref, std::vector<double>* got) {
  std::mt19937_64 rng(seed);
  for (int t = 0; t < samples; ++t) {
    const int64_t i = static_cast<int64_t>(rng() % m), j = static_cast<int64_t>(rng() % n);
    double acc = 0.0;
    for (int64_t q = 0; q < k; ++q) acc += act(i, q) * nvfp4_value(wp, wsc, j, q, k);
    ref->push_back(acc * scale);
    got->push_back(formats::bf16_to_float(d[static_cast<size_t>(i * n + j)]));
  }
}

// NVFP4 activations (ap, asc), D = g_a g_b A W^T: `scale` = g_a g_b.
inline void sample_nvfp4_outputs(const std::vector<uint8_t>& ap, const std::vector<uint8_t>& asc,
                                 const std::vector<uint8_t>& wp, const std::vector<uint8_t>& wsc,
                                 const std::vector<uint16_t>& d, int64_t m, int64_t n, int64_t k, double scale,
                                 int samples, uint64_t seed, std::vector<double>* ref, std::vector<double>* got) {
  sample_outputs([&](int64_t i, int64_t q) { return nvfp4_value(ap, asc, i, q, k); }, wp, wsc, d, m, n, k, scale,
                 samples, seed, ref, got);
}

// BF16 activations (W4A16), D = g_b A W^T: `scale` = g_b.
inline void sample_w4a16_outputs(const std::vector<uint16_t>& abf, const std::vector<uint8_t>& wp,
                                 const std::vector<uint8_t>& wsc, const std::vector<uint16_t>& d, int64_t m, int64_t n,
                                 int64_t k, double scale, int samples, uint64_t seed, std::vector<double>* ref,
                                 std::vector<double>* got) {
  sample_outputs(
      [&](int64_t i, int64_t q) { return static_cast<double>(formats::bf16_to_float(abf[static_cast<size_t>(i * k + q)])); },
      wp, wsc, d, m, n, k, scale, samples, seed, ref, got);
}

inline int64_t count_nonfinite_bf16(const std::vector<uint16_t>& d) {
  int64_t bad = 0;
  for (uint16_t v : d)
    if (!std::isfinite(formats::bf16_to_float(v))) ++bad;
  return bad;
}

// FAIL when outputs were left unwritten (NaN poison), non-finite, or off by more than 4e-3
// norm-wise (BF16 output rounding is ~1.6e-3). `what` names a check other than the reported
// NVFP4 x NVFP4 config's (W4A16, an --alt config): its error is not recorded, only a failure.
inline void nvfp4_verdict(const std::vector<double>& ref, const std::vector<double>& got, int64_t unwritten,
                          Result* r, const std::string& what = "") {
  const auto e = reference::compare(ref, got);
  if (what.empty()) {
    r->err = e.rel_fro;
    r->max_err = e.max_rel;
  }
  if (!r->status.empty()) return;  // a row already failed keeps its first reason
  const std::string who = what.empty() ? "" : what + ": ";
  if (unwritten > 0) r->status = "FAIL: " + who + std::to_string(unwritten) + " outputs not written";
  else if (e.nonfinite > 0) r->status = "FAIL: " + who + "non-finite outputs";
  else if (e.rel_fro > 4e-3) r->status = "FAIL: " + who + "error " + std::to_string(e.rel_fro);
}

// Times `launches` with one more launcher per config after the first (`run_cfg(config, stream,
// i)`), interleaved, and prints each of those against launcher 0 (the reported config).
template <class RunCfg>
Status time_with_alt_configs(std::vector<LaunchFn> launches, const std::vector<Nvfp4GemmConfig>& cfgs,
                             const RunCfg& run_cfg, cudaStream_t s, int batch, int samples, std::vector<Timing>* t) {
  const size_t first_alt = launches.size();
  for (size_t c = 1; c < cfgs.size(); ++c)
    launches.push_back([&, c](cudaStream_t st, int i) { return run_cfg(cfgs[c], st, i); });
  LOWBIT_RETURN_IF_ERROR(time_graphs_interleaved(launches, s, batch, samples, t));
  for (size_t c = 1; c < cfgs.size(); ++c)
    std::printf("  alt %-24s %9.2f us  (%.3f x the reported config)\n", cfgs[c].to_string().c_str(),
                (*t)[first_alt + c - 1].median_us, (*t)[0].median_us / (*t)[first_alt + c - 1].median_us);
  return Status::Ok();
}

}  // namespace lowbit::bench
