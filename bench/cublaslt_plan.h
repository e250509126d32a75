// What every cuBLASLt FP8 baseline shares: the handle, a "TN" matmul descriptor with FP32
// compute (non-fast accumulation unless asked), the layouts of our row-major D[M,N] = A[M,K] . B[N,K]^T,
// the workspace, the heuristic's answers and a run that falls back past NOT_SUPPORTED answers.
//
// Row-major D = A . B^T is, column-major, D^T[N,M] = B . A^T: cuBLASLt's "A" is our B
// (transposed, ld K), its "B" is our A (ld K), and its D is N x M with ld N -- the "TN" layout
// FP8 requires. So cuBLASLt's (m, n, k) are our (N, M, K), and its A/B attributes (scale
// pointers, scale modes) describe our B/A.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "lowbit/gemm.h"
#include "lowbit/status.h"

namespace lowbit::bench {

Status lt_error(const char* what, cublasStatus_t st);

#define LOWBIT_LT_CHECK(what, expr)                                          \
  do {                                                                       \
    const cublasStatus_t _lt_st = (expr);                                    \
    if (_lt_st != CUBLAS_STATUS_SUCCESS) return ::lowbit::bench::lt_error(what, _lt_st); \
  } while (0)

class LtTnPlan {
 public:
  LtTnPlan() = default;
  ~LtTnPlan() { release(); }
  LtTnPlan(const LtTnPlan&) = delete;
  LtTnPlan& operator=(const LtTnPlan&) = delete;

  void release();
  // Handle and descriptor; the caller then sets its own attributes on desc(). `fast_accum`:
  // FP8 products accumulate in the tensor cores' reduced precision across all of K (the
  // default is FP32 promotion, as lowbit's dense and promoted kernels do).
  Status create(bool fast_accum = false);
  cublasLtMatmulDesc_t desc() const { return op_; }
  // Layouts, workspace and the heuristic's answers (none: a kCudaError Status naming `label`).
  Status finish(int64_t m, int64_t n, int64_t k, OutType out, const char* label);
  // The same with explicit element types (input A/B, output C/D), for non-FP8 baselines.
  Status finish_types(int64_t m, int64_t n, int64_t k, cudaDataType_t in, cudaDataType_t out, const char* label);
  bool ready() const { return num_algos_ > 0; }
  // One matmul D = alpha * A . B^T (beta 0). cuBLASLt's first answer is what a user gets; if it
  // refuses to run (NOT_SUPPORTED) before any run succeeded, the next answer is tried, as
  // frameworks do, and the note says so. After a success the algorithm never changes.
  Status matmul(const void* a, const void* b, void* d, float alpha, cudaStream_t s);
  // "<label> heuristic #i/n: algo A tile T stages S splitK K cluster C" (cuBLASLt's enum ids).
  const std::string& note() const { return note_; }

 private:
  void describe();
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
  std::string label_;
  std::string note_;
};

}  // namespace lowbit::bench
