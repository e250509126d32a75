// lowbit-bench: shared option and result types.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "lowbit/gemm.h"

namespace lowbit::bench {

// Ceilings behind every "% of floor" (shared/workloads.md): nominal dense FP8 tensor rate and
// the device-to-device copy bandwidth measured on our H100 (bytes read + written).
constexpr double kPeakFp8Tflops = 1979.0;
constexpr double kCopyTBs = 3.0;

struct Options {
  std::string suite = "default";
  std::vector<std::string> shapes;  // "MxNxK"
  std::string config;               // forced lowbit config, empty = chooser
  std::vector<std::string> alt_configs;  // more configs timed alongside (--alt), interleaved
  OutType out = OutType::kBF16;  // FP16: the dense FP8 GEMM (W1, custom shapes) only
  bool bias = false;
  // The dense FP8 GEMM with per-token x per-channel scales (Fp8GemmArgs::a_row_scale and
  // b_row_scale) instead of per-tensor ones, against cuBLASLt's outer-vector scaling.
  bool rowwise = false;
  bool baseline = true;
  bool explain = false;
  int samples = 50;
  uint64_t seed = 0;
  std::string json;
  std::string sparse;  // custom shapes: "e4m3" or "f16" runs them through the 2:4-sparse GEMM (W3)
  bool fast_accum = false;  // W3 E4M3: the reported config and the --alt ones run with fast accumulation
};

struct Shape {
  Shape() = default;
  Shape(std::string s, int64_t m_, int64_t n_, int64_t k_, int64_t period_ = 0, std::vector<int64_t> group_m_ = {})
      : suite(std::move(s)), m(m_), n(n_), k(k_), period(period_), group_m(std::move(group_m_)) {}
  std::string suite;
  int64_t m = 0, n = 0, k = 0;
  int64_t period = 0;  // W2: patches per image (rows of the positional embedding)
  std::vector<int64_t> group_m;  // grouped suites: M of each group (m is then unused)
  int experts = 0, top_k = 0;    // W6 (MoE)
};

struct Result {
  Shape shape;
  std::string config;
  double us = 0, us_base = 0;          // medians per launch
  double tflops = 0, gbs = 0, floor_us = 0, pct_floor = 0, speedup = 0;
  double err = 0, err_base = 0;        // norm-wise relative error on sampled outputs
  double max_err = 0, max_err_base = 0;
  int batch = 0, samples = 0;
  std::string status;                  // "ok" or an error message
  // W2 only: the unfused pipeline (cuBLASLt GEMM+bias, then a row-broadcast add kernel).
  double us_unfused = 0, x_unfused = 0, err_unfused = 0;
  // W4 only: more same-run baselines and our other paths.
  double us_bf16 = 0, x_bf16 = 0;  // cuBLAS BF16 GEMM
  double us_w4a16 = 0;             // ours with BF16 activations
  double us_fp8_ours = 0;          // our FP8 GEMM
  double compute_floor_us = 0;     // FLOPs at the BF16 dense tensor rate (the kernel's MMA)
  // Grouped suites: our dense kernel launched once per group.
  double us_loop = 0, x_loop = 0;
  double us_masked = 0;  // block-scaled grouped: the masked layout's call on the same slabs
  double us_contiguous = 0;  // block-scaled grouped, groups of one size: the contiguous layout's call
  // W3 only: cuSPARSELt on the same sparse A (0: not built or failed), and its sampled error.
  double us_cusparselt = 0, err_cusparselt = 0;
  // W3 E4M3 only: our kernel with fast accumulation (Sparse24GemmArgs::fast_accum), its config,
  // and dense cuBLASLt with fast accumulation too (CUBLASLT_MATMUL_DESC_FAST_ACCUM): fast is
  // compared with fast, promoted with promoted.
  double us_fast = 0, err_fast = 0;
  double us_base_fast = 0, err_base_fast = 0;
  std::string config_fast;
  double similarity = 0;  // DeepGEMM's 1 - 2 sum(xy) / (sum x^2 + sum y^2) on the sampled outputs
  // W6 only: deterministic mode, and each stage's share (differences of timed stage prefixes).
  double us_det = 0;
  std::vector<std::pair<std::string, double>> stages;
  // W5 / W6: `us` is ours with the call's first kernel launched without PDL
  // (Nvfp4GroupedArgs::pdl_first, MoeConfig::pdl_first = 0), so it cannot start under the
  // previous call's tail in the timed batch -- which the baselines' launches never do either.
  // This is the library's default config, whose first kernel may (W5; W6's tiny path).
  double us_pdl_first = 0;
};

Status run_fp8_shape(const Options& opt, const Shape& shape, Result* r);
Status run_patch_embed_shape(const Options& opt, const Shape& shape, Result* r);
Status run_nvfp4_shape(const Options& opt, const Shape& shape, Result* r);
Status run_nvfp4_grouped_shape(const Options& opt, const Shape& shape, Result* r);
Status run_blockscaled_shape(const Options& opt, const Shape& shape, Result* r);
Status run_moe_shape(const Options& opt, const Shape& shape, Result* r);
Status run_sparse_shape(const Options& opt, const Shape& shape, Result* r);
// --host-overhead: host us per eager call of the main entry points (bench/host_overhead.cpp);
// 0 when every call ran.
int run_host_overhead(int64_t m, int64_t n, int64_t k, double target_us);

// Nominal dense BF16 tensor rate (H100 SXM): the NVFP4 kernel's MMAs run at it.
constexpr double kPeakBf16Tflops = 989.0;

}  // namespace lowbit::bench
