#include "cublaslt_blockscaled.h"

#include <string>

namespace lowbit::bench {
namespace {

Status cuda_error(const char* what, cudaError_t e) {
  return Status::Error(StatusCode::kCudaError, std::string("cuBLASLt block-scaled ") + what + ": " +
                                                   cudaGetErrorString(e));
}

#define CUDA_CHECK_ST(what, expr)                   \
  do {                                              \
    cudaError_t _e = (expr);                        \
    if (_e != cudaSuccess) return cuda_error(what, _e); \
  } while (0)

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace

CublasLtFp8BlockScaled::~CublasLtFp8BlockScaled() { release(); }

void CublasLtFp8BlockScaled::release() {
  lt_.release();
  if (sfa_lt_) cudaFree(sfa_lt_);
  if (sfb_lt_) cudaFree(sfb_lt_);
  sfa_lt_ = sfb_lt_ = nullptr;
  lt_a_scale_ = lt_b_scale_ = nullptr;
  scales_ready_ = false;
}

Status CublasLtFp8BlockScaled::set_scale_pointers(const float* a_scale, const float* b_scale) {
  if (a_scale != lt_a_scale_) {
    const void* p = a_scale;
    LOWBIT_LT_CHECK("a_scale ptr",
                    cublasLtMatmulDescSetAttribute(lt_.desc(), CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &p, sizeof(p)));
    lt_a_scale_ = a_scale;
  }
  if (b_scale != lt_b_scale_) {
    const void* p = b_scale;
    LOWBIT_LT_CHECK("b_scale ptr",
                    cublasLtMatmulDescSetAttribute(lt_.desc(), CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &p, sizeof(p)));
    lt_b_scale_ = b_scale;
  }
  return Status::Ok();
}

// The TN mapping of cublaslt_plan.h: cuBLASLt's (m, n, k) are our (N, M, K).
Status CublasLtFp8BlockScaled::plan(int64_t m, int64_t n, int64_t k, OutType out) {
  release();
#if !defined(CUBLAS_VERSION) || CUBLAS_VERSION < 120900
  (void)m, (void)n, (void)k, (void)out;
  return Status::Error(StatusCode::kCudaError,
                       "cuBLASLt block-scaled FP8 (VEC128_32F / BLK128x128_32F) needs cuBLAS >= 12.9");
#else
  if (m <= 0 || n <= 0 || k <= 0)
    return Status::Invalid("cuBLASLt block-scaled: m, n, k must be positive");
  // cuBLAS docs, "Scaling factors layouts": "M and N must be multiples of 4" (cuBLASLt's M, N =
  // our N, M); the VEC128 scale columns have stride exactly our M, so this keeps them 16B aligned.
  if (m % 4 != 0 || n % 4 != 0)
    return Status::Invalid("cuBLASLt block-scaled FP8 needs M and N multiples of 4 (got M=" + std::to_string(m) +
                           ", N=" + std::to_string(n) + ")");
  m_ = m;
  n_ = n;
  k_ = k;
  kblocks_ = (k + 127) / 128;
  kblocks4_ = (kblocks_ + 3) / 4 * 4;
  nblocks_ = (n + 127) / 128;

  // cuBLASLt-layout scale buffers (cudaMalloc: 256-byte aligned). The sfb padding columns are
  // zeroed once here; convert_scales only ever writes the first kblocks entries of each column.
  const size_t sfb_bytes = static_cast<size_t>(nblocks_ * kblocks4_) * sizeof(float);
  const size_t sfa_bytes = static_cast<size_t>(kblocks_ * m_) * sizeof(float);
  CUDA_CHECK_ST("sfb buffer allocation", cudaMalloc(reinterpret_cast<void**>(&sfb_lt_), sfb_bytes));
  CUDA_CHECK_ST("sfa buffer allocation", cudaMalloc(reinterpret_cast<void**>(&sfa_lt_), sfa_bytes));
  CUDA_CHECK_ST("sfb buffer clear", cudaMemset(sfb_lt_, 0, sfb_bytes));
  CUDA_CHECK_ST("sfa buffer clear", cudaMemset(sfa_lt_, 0, sfa_bytes));

  LOWBIT_RETURN_IF_ERROR(lt_.create());
  cublasLtMatmulDesc_t op = lt_.desc();
  const int32_t a_mode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;  // cuBLASLt A = our B
  const int32_t b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;      // cuBLASLt B = our A
  LOWBIT_LT_CHECK("a_scale_mode",
                  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &a_mode, sizeof(a_mode)));
  LOWBIT_LT_CHECK("b_scale_mode",
                  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &b_mode, sizeof(b_mode)));
  // Valid, aligned pointers for the heuristic; convert_scales() re-points them if needed.
  LOWBIT_RETURN_IF_ERROR(set_scale_pointers(sfb_lt_, sfa_lt_));
  // No algorithm: not sm_90, cuBLAS < 12.9, or K not a multiple of 16.
  LOWBIT_RETURN_IF_ERROR(lt_.finish(m, n, k, out, "cuBLASLt block-scaled FP8 (A=BLK128x128 of B, B=VEC128 of A)"));
  return Status::Ok();
#endif
}

Status CublasLtFp8BlockScaled::convert_scales(const float* sfa, int64_t sfa_ld, const float* sfb, cudaStream_t s) {
  if (!lt_.ready()) return Status::Invalid("cuBLASLt block-scaled: convert_scales before a successful plan");
  if (!sfa || !sfb) return Status::Invalid("cuBLASLt block-scaled: null scale pointer");
  if (sfa_ld < m_)
    return Status::Invalid("cuBLASLt block-scaled: sfa_ld (" + std::to_string(sfa_ld) + ") < M (" +
                           std::to_string(m_) + ")");
  scales_ready_ = false;

  // cuBLASLt A (our B), BLK128x128_32F: K-major, column stride L4 = round_up(kblocks, 4).
  // Ours: row nb of kblocks floats, stride kblocks. Same memory iff kblocks % 4 == 0.
  const float* a_scale = sfb;
  if (kblocks_ != kblocks4_ || !aligned16(sfb)) {
    CUDA_CHECK_ST("sfb relayout",
                  cudaMemcpy2DAsync(sfb_lt_, static_cast<size_t>(kblocks4_) * sizeof(float), sfb,
                                    static_cast<size_t>(kblocks_) * sizeof(float),
                                    static_cast<size_t>(kblocks_) * sizeof(float), static_cast<size_t>(nblocks_),
                                    cudaMemcpyDeviceToDevice, s));
    a_scale = sfb_lt_;
  }

  // cuBLASLt B (our A), VEC128_32F: N-major (its N = our M), shape M x kblocks, column stride M.
  // Ours: column kb at sfa + kb * sfa_ld. Same memory iff sfa_ld == M.
  const float* b_scale = sfa;
  if (sfa_ld != m_ || !aligned16(sfa)) {
    CUDA_CHECK_ST("sfa relayout",
                  cudaMemcpy2DAsync(sfa_lt_, static_cast<size_t>(m_) * sizeof(float), sfa,
                                    static_cast<size_t>(sfa_ld) * sizeof(float), static_cast<size_t>(m_) * sizeof(float),
                                    static_cast<size_t>(kblocks_), cudaMemcpyDeviceToDevice, s));
    b_scale = sfa_lt_;
  }

  LOWBIT_RETURN_IF_ERROR(set_scale_pointers(a_scale, b_scale));
  scales_ready_ = true;
  return Status::Ok();
}

Status CublasLtFp8BlockScaled::run(const void* a, const void* b, void* d, cudaStream_t s) {
  if (!scales_ready_) return Status::Invalid("cuBLASLt block-scaled: run before convert_scales");
  return lt_.matmul(a, b, d, 1.0f, s);
}

}  // namespace lowbit::bench
