// The cuBLASLt FP8 baseline: the same D = alpha * a_scale * b_scale * A . B^T (+ bias) with
// cuBLASLt's default (non-fast) accumulation, used by the bench and by the accuracy tests.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "lowbit/gemm.h"
#include "lowbit/status.h"

namespace lowbit::bench {

class CublasLtFp8 {
 public:
  CublasLtFp8() = default;
  ~CublasLtFp8();
  CublasLtFp8(const CublasLtFp8&) = delete;
  CublasLtFp8& operator=(const CublasLtFp8&) = delete;

  // Creates the handle, the plan for this shape and the workspace (setup, never timed).
  Status plan(int64_t m, int64_t n, int64_t k, OutType out, bool with_bias, const float* a_scale,
              const float* b_scale);
  // Enqueues one matmul on the stream.
  Status run(const void* a, const void* b, void* d, const void* bias, float alpha, cudaStream_t s);
  const std::string& algo_note() const { return note_; }

 private:
  void release();
  cublasLtHandle_t handle_ = nullptr;
  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatrixLayout_t la_ = nullptr, lb_ = nullptr, lc_ = nullptr, ld_ = nullptr;
  static constexpr int kMaxAlgos = 8;
  cublasLtMatmulHeuristicResult_t heuristics_[kMaxAlgos]{};
  int num_algos_ = 0;
  int chosen_ = 0;
  bool locked_ = false;  // an algorithm ran: never switch afterwards (timing stays on one)
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::string note_;
};

}  // namespace lowbit::bench
