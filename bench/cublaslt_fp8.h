// The cuBLASLt FP8 baseline: the same D = alpha * a_scale * b_scale * A . B^T (+ bias), or with
// per-token x per-channel scales, with cuBLASLt's default (non-fast) accumulation unless asked,
// used by the bench and by the accuracy tests.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cublaslt_plan.h"
#include "lowbit/gemm.h"
#include "lowbit/status.h"

namespace lowbit::bench {

class CublasLtFp8 {
 public:
  // Creates the handle, the plan for this shape and the workspace (setup, never timed). The bias
  // is BF16, but FP16 with FP16 output: cuBLASLt's FP8 bias type follows a 16-bit D.
  Status plan(int64_t m, int64_t n, int64_t k, OutType out, bool with_bias, const float* a_scale,
              const float* b_scale, bool fast_accum = false);
  // The same with per-token x per-channel scales instead, as torch._scaled_mm's rowwise scaling
  // runs it: alpha * a_row_scale[row] * b_row_scale[col] * A . B^T, FP32 [m] and [n] on the
  // device, in cuBLASLt's outer-vector scale mode (cuBLAS >= 12.9).
  Status plan_rowwise(int64_t m, int64_t n, int64_t k, OutType out, bool with_bias, const float* a_row_scale,
                      const float* b_row_scale);
  // Enqueues one matmul on the stream.
  Status run(const void* a, const void* b, void* d, const void* bias, float alpha, cudaStream_t s);
  const std::string& algo_note() const { return lt_.note(); }

 private:
  Status set_bias_epilogue(OutType out);
  LtTnPlan lt_;
};

// Dense FP16 x FP16 -> FP16 with FP32 compute: the dense baseline of the FP16 sparse GEMM.
class CublasLtF16 {
 public:
  Status plan(int64_t m, int64_t n, int64_t k);
  Status run(const void* a, const void* b, void* d, float alpha, cudaStream_t s) { return lt_.matmul(a, b, d, alpha, s); }
  const std::string& algo_note() const { return lt_.note(); }

 private:
  LtTnPlan lt_;
};

}  // namespace lowbit::bench
