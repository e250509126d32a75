#include "cublaslt_fp8.h"

#include <string>

namespace lowbit::bench {
namespace {

Status lt_error(const char* what, cublasStatus_t st) {
  return Status::Error(StatusCode::kCudaError, std::string("cuBLASLt ") + what + " failed: status " +
                                                   std::to_string(static_cast<int>(st)));
}

#define LT_CHECK(what, expr)                        \
  do {                                              \
    cublasStatus_t _st = (expr);                    \
    if (_st != CUBLAS_STATUS_SUCCESS) return lt_error(what, _st); \
  } while (0)

}  // namespace

CublasLtFp8::~CublasLtFp8() { release(); }

void CublasLtFp8::release() {
  if (la_) cublasLtMatrixLayoutDestroy(la_);
  if (lb_) cublasLtMatrixLayoutDestroy(lb_);
  if (lc_) cublasLtMatrixLayoutDestroy(lc_);
  if (ld_) cublasLtMatrixLayoutDestroy(ld_);
  if (op_) cublasLtMatmulDescDestroy(op_);
  if (handle_) cublasLtDestroy(handle_);
  if (workspace_) cudaFree(workspace_);
  la_ = lb_ = lc_ = ld_ = nullptr;
  op_ = nullptr;
  handle_ = nullptr;
  workspace_ = nullptr;
}

// Row-major D[M,N] = A[M,K] . B[N,K]^T is, column-major, D^T[N,M] = B . A^T: cuBLASLt's "A" is
// our B (transposed, ld K), its "B" is our A (ld K), and its D is N x M with ld N -- the "TN"
// layout FP8 requires.
Status CublasLtFp8::plan(int64_t m, int64_t n, int64_t k, OutType out, bool with_bias, const float* a_scale,
                         const float* b_scale) {
  release();
  LT_CHECK("create", cublasLtCreate(&handle_));
  LT_CHECK("desc", cublasLtMatmulDescCreate(&op_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  LT_CHECK("transa", cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  LT_CHECK("transb", cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  const int8_t fast = 0;
  LT_CHECK("fast_accum", cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof(fast)));
  if (b_scale)
    LT_CHECK("a_scale", cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &b_scale,
                                                       sizeof(b_scale)));
  if (a_scale)
    LT_CHECK("b_scale", cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &a_scale,
                                                       sizeof(a_scale)));
  if (with_bias) {
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    LT_CHECK("epilogue", cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    const cudaDataType_t bt = CUDA_R_16BF;
    LT_CHECK("bias type", cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt)));
  }
  const cudaDataType_t dt = out == OutType::kFP32 ? CUDA_R_32F : CUDA_R_16BF;
  LT_CHECK("layout a", cublasLtMatrixLayoutCreate(&la_, CUDA_R_8F_E4M3, k, n, k));
  LT_CHECK("layout b", cublasLtMatrixLayoutCreate(&lb_, CUDA_R_8F_E4M3, k, m, k));
  LT_CHECK("layout c", cublasLtMatrixLayoutCreate(&lc_, dt, n, m, n));
  LT_CHECK("layout d", cublasLtMatrixLayoutCreate(&ld_, dt, n, m, n));

  workspace_bytes_ = 32u << 20;
  if (cudaMalloc(&workspace_, workspace_bytes_) != cudaSuccess)
    return Status::Error(StatusCode::kCudaError, "cuBLASLt workspace allocation failed");
  cublasLtMatmulPreference_t pref = nullptr;
  LT_CHECK("pref", cublasLtMatmulPreferenceCreate(&pref));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes_,
                                       sizeof(workspace_bytes_));
  int found = 0;
  const cublasStatus_t hs =
      cublasLtMatmulAlgoGetHeuristic(handle_, op_, la_, lb_, lc_, ld_, pref, kMaxAlgos, heuristics_, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (hs != CUBLAS_STATUS_SUCCESS || found == 0) return lt_error("heuristic (no algorithm)", hs);
  num_algos_ = found;
  chosen_ = 0;
  note_ = "cuBLASLt heuristic #1";
  return Status::Ok();
}

Status CublasLtFp8::run(const void* a, const void* b, void* d, const void* bias, float alpha, cudaStream_t s) {
  if (bias)
    LT_CHECK("bias ptr", cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  const float beta = 0.0f;
  // cuBLASLt's first heuristic answer is what a user gets; if it refuses to run (NOT_SUPPORTED),
  // fall back to its next answer, as frameworks do, and say so in the note.
  for (;;) {
    const cublasStatus_t st = cublasLtMatmul(handle_, op_, &alpha, b, la_, a, lb_, &beta, d, lc_, d, ld_,
                                             &heuristics_[chosen_].algo, workspace_, workspace_bytes_, s);
    if (st == CUBLAS_STATUS_SUCCESS) {
      locked_ = true;
      return Status::Ok();
    }
    if (st != CUBLAS_STATUS_NOT_SUPPORTED || locked_ || chosen_ + 1 >= num_algos_) return lt_error("matmul", st);
    ++chosen_;
    note_ = "cuBLASLt heuristic #" + std::to_string(chosen_ + 1) + " (earlier answers NOT_SUPPORTED)";
  }
}

}  // namespace lowbit::bench
