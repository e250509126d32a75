// The oracle for every GEMM test: a CPU GEMM over the same quantized inputs with FP64
// accumulation. Inputs are given already decoded to float (exact for E4M3, BF16 and FP16).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace lowbit::reference {

struct GemmProblem {
  int64_t m = 0, n = 0, k = 0;
  const float* a = nullptr;     // [m, k] row-major
  const float* b = nullptr;     // [n, k] row-major
  double alpha = 1.0;
  const float* row_scale = nullptr;  // [m] or null: per-token scales (alpha * row_scale[r] * col_scale[c])
  const float* col_scale = nullptr;  // [n] or null: per-channel scales
  const float* bias = nullptr;       // [n] or null
  const float* row_bcast = nullptr;  // [row_period, n] or null: row r adds row r % row_period
  int64_t row_period = 1;
  int activation = 0;                // 0 none, 1 GELU (erf), 2 SiLU
  const float* residual = nullptr;   // [m, n] or null, added after the activation
};

// One output element, in FP64: act(alpha * row_scale[r] * col_scale[c] * sum_k a[r,k] * b[c,k] + bias[c]
// + row_bcast[r % P][c])
// + residual[r][c] (the order of gemm/core/epilogue_params.h).
double gemm_element(const GemmProblem& p, int64_t row, int64_t col);

// The whole [m, n] output in FP64 (threads over rows).
std::vector<double> gemm_full(const GemmProblem& p);

// Block-scaled GEMM (lowbit/blockscaled.h): out[r][c] = sum over 128-wide K blocks kb of
// sfa[kb * sfa_ld + r] * sfb[(c / 128) * kblocks + kb] * sum_{k in kb} a[r,k] * b[c,k], in FP64.
struct BlockScaledProblem {
  int64_t m = 0, n = 0, k = 0;
  const float* a = nullptr;  // [m, k] decoded E4M3 values
  const float* b = nullptr;  // [n, k]
  const float* sfa = nullptr;
  int64_t sfa_ld = 0;
  const float* sfb = nullptr;
};
double blockscaled_element(const BlockScaledProblem& p, int64_t row, int64_t col);
std::vector<double> blockscaled_full(const BlockScaledProblem& p);

// DeepGEMM's accuracy measure: 1 - 2 sum(x y) / (sum x^2 + sum y^2) (0 = identical).
double similarity_diff(const std::vector<double>& ref, const std::vector<double>& got);

// Error of `got` (m*n values read through `get`) against `ref`: the norm-wise relative error
// ||got - ref|| / ||ref|| and the largest element error relative to max|ref|.
struct ErrorStats {
  double rel_fro = 0.0;
  double max_rel = 0.0;
  int64_t nonfinite = 0;
  int64_t worst_index = -1;
};
ErrorStats compare(const std::vector<double>& ref, const std::vector<double>& got);

}  // namespace lowbit::reference
