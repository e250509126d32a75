// Small pieces shared by the bench runners and the GPU tests.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench.h"
#include "device_fill.h"
#include "formats/bf16.h"
#include "formats/fp16.h"
#include "lowbit/gemm.h"
#include "lowbit/status.h"
#include "reference/reference_gemm.h"

namespace lowbit::bench {

inline Status cuda_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  return Status::Error(StatusCode::kCudaError, std::string(what) + ": " + cudaGetErrorString(e));
}

// Owns one device allocation (never fewer than 16 bytes, so empty tensors still get a pointer).
struct DeviceBuffer {
  void* p = nullptr;
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : p(o.p) { o.p = nullptr; }
  ~DeviceBuffer() {
    if (p) cudaFree(p);
  }
  Status alloc(size_t bytes) { return cuda_status(cudaMalloc(&p, bytes ? bytes : 16), "cudaMalloc"); }
};

// A non-blocking stream destroyed with its owner.
struct OwnedStream {
  cudaStream_t s = nullptr;
  OwnedStream() = default;
  OwnedStream(const OwnedStream&) = delete;
  OwnedStream& operator=(const OwnedStream&) = delete;
  ~OwnedStream() {
    if (s) cudaStreamDestroy(s);
  }
  Status create() { return cuda_status(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream"); }
};

// Element i of a raw BF16, FP16 or FP32 output copied back to the host.
inline double read_output(const std::vector<uint8_t>& raw, OutType t, size_t i) {
  if (t == OutType::kFP32) {
    float f;
    std::memcpy(&f, raw.data() + 4 * i, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, raw.data() + 2 * i, 2);
  return t == OutType::kFP16 ? formats::fp16_to_float(h) : formats::bf16_to_float(h);
}

// Reruns one launcher that is timed, for its check: poisons its `elems` outputs of type `t`,
// runs `launch(stream)` on input set 0, and returns how many of all the outputs are not finite
// (poison left unwritten) and the outputs at the indices `sampled`.
template <class Launch>
Status rerun_and_sample(const Launch& launch, void* out, int64_t elems, OutType t, const std::vector<int64_t>& sampled,
                        cudaStream_t s, int64_t* nonfinite, std::vector<double>* got) {
  const size_t bytes = static_cast<size_t>(elems) * (t == OutType::kFP32 ? 4 : 2);
  LOWBIT_RETURN_IF_ERROR(cuda_status(fill_u16(out, bytes / 2, 0xFFFF, s), "poison"));
  LOWBIT_RETURN_IF_ERROR(launch(s));
  LOWBIT_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(s), "run"));
  std::vector<uint8_t> h(bytes);
  LOWBIT_RETURN_IF_ERROR(cuda_status(cudaMemcpy(h.data(), out, bytes, cudaMemcpyDeviceToHost), "copy back"));
  *nonfinite = 0;
  for (int64_t i = 0; i < elems; ++i)
    if (!std::isfinite(read_output(h, t, static_cast<size_t>(i)))) ++*nonfinite;
  got->clear();
  for (int64_t idx : sampled) got->push_back(read_output(h, t, static_cast<size_t>(idx)));
  return Status::Ok();
}

// The configs a bench run times, for any kernel family: [0] is --config parsed by `parse` (or
// `choose`'s pick), then every --alt. Parse: Status(const std::string&, Config*); Choose: Status(Config*).
template <class Config, class Parse, class Choose>
Status config_list(const Options& opt, Parse parse, Choose choose, std::vector<Config>* cfgs) {
  cfgs->assign(1, Config{});
  LOWBIT_RETURN_IF_ERROR(opt.config.empty() ? choose(&(*cfgs)[0]) : parse(opt.config, &(*cfgs)[0]));
  for (const auto& alt : opt.alt_configs) {
    Config c;
    LOWBIT_RETURN_IF_ERROR(parse(alt, &c));
    cfgs->push_back(c);
  }
  return Status::Ok();
}

// The FP8 GEMM's configs, and the largest workspace any of them needs.
inline Status resolve_configs(const Options& opt, int64_t m, int64_t n, int64_t k, std::vector<Fp8GemmConfig>* cfgs,
                              size_t* workspace_bytes, Fp8EpilogueKind epilogue, int64_t row_bcast_rows = 0) {
  LOWBIT_RETURN_IF_ERROR(config_list(
      opt, parse_fp8_config,
      [&](Fp8GemmConfig* c) { return choose_fp8_config(m, n, k, c, epilogue, row_bcast_rows, opt.out); }, cfgs));
  *workspace_bytes = 0;
  for (const auto& c : *cfgs) *workspace_bytes = std::max(*workspace_bytes, fp8_gemm_workspace_size(m, n, k, c));
  return Status::Ok();
}

// Input sets to rotate so that two L2s' worth of operands pass between reuses of one set.
// `footprint` is the smallest per-launch footprint among the launchers timed together (the
// one that would otherwise hit in L2 first); `cap` bounds the memory spent on copies.
inline int rotation_sets(size_t l2_bytes, size_t footprint, int cap = 32) {
  if (footprint == 0) return cap;
  const size_t want = (2 * l2_bytes + footprint - 1) / footprint;
  return static_cast<int>(std::clamp<size_t>(want, 1, static_cast<size_t>(cap)));
}

// The project's accuracy bar on the sampled outputs: at most twice the error of the
// same-precision baseline on the same inputs (`err_base` > 0), else `fallback` (no baseline
// ran). A row already failed keeps its first reason. NaN errors fail.
inline void gate_error(Result* r, const char* what, double err, double err_base, double fallback) {
  if (!r->status.empty()) return;
  const double bound = err_base > 0 ? 2.0 * err_base : fallback;
  if (err <= bound) return;
  char buf[160];
  std::snprintf(buf, sizeof(buf), "FAIL: %s error %.3g above %.3g (%s)", what, err, bound,
                err_base > 0 ? "2x the baseline's" : "the no-baseline bound");
  r->status = buf;
}

// A baseline's error on the sampled outputs. A baseline with non-finite outputs did other work:
// it is dropped from timing (`*enabled` false, `note` says why) and reports no error.
inline reference::ErrorStats baseline_error(const std::vector<double>& ref, const std::vector<double>& got,
                                            const std::string& who, bool* enabled, std::string* note) {
  const reference::ErrorStats e = reference::compare(ref, got);
  if (e.nonfinite == 0) return e;
  *enabled = false;
  *note = who + " left non-finite outputs";
  return {};
}

// Whether a row passed its checks: "ok", or "ok (...)" with a note on a missing secondary
// baseline. Only such rows count in a suite's geomean; any other row fails the run.
inline bool row_passed(const Result& r) { return r.status == "ok" || r.status.rfind("ok (", 0) == 0; }

// A baseline's first (correctness) run: on failure the baseline is dropped from timing and
// `note` says why.
inline void keep_baseline_if_ok(const Status& st, const char* what, bool* enabled, std::string* note) {
  if (st.ok()) return;
  *enabled = false;
  *note = std::string(what) + " failed: " + st.to_string();
}

// The rates a shape reports from its medians r->us (ours) and r->us_base (0: no baseline ran):
// TFLOPS, GB/s, the floor max(flops / peak, bytes / copy bandwidth) and its share, x baseline,
// and status "ok" unless a check or `note` (why the baseline is missing) says otherwise.
inline void set_rates(Result* r, double flops, double bytes, double peak_tflops, int batch, int samples,
                      const std::string& note) {
  r->tflops = flops / (r->us * 1e6);
  r->gbs = bytes / (r->us * 1e3);
  r->floor_us = std::max(flops / (peak_tflops * 1e6), bytes / (kCopyTBs * 1e6));
  r->pct_floor = 100.0 * r->floor_us / r->us;
  r->speedup = r->us_base > 0 ? r->us_base / r->us : 0.0;
  r->batch = batch;
  r->samples = samples;
  if (r->status.empty()) r->status = note.empty() ? "ok" : note;
}

}  // namespace lowbit::bench
