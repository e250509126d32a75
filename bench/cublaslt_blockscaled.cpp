#include "cublaslt_blockscaled.h"

#include <string>

namespace lowbit::bench {
namespace {

Status lt_error(const char* what, cublasStatus_t st) {
  return Status::Error(StatusCode::kCudaError, std::string("cuBLASLt ") + what + " failed: status " +
                                                   std::to_string(static_cast<int>(st)));
}

Status cuda_error(const char* what, cudaError_t e) {
  return Status::Error(StatusCode::kCudaError, std::string("cuBLASLt block-scaled ") + what + ": " +
                                                   cudaGetErrorString(e));
}

#define LT_CHECK(what, expr)                        \
  do {                                              \
    cublasStatus_t _st = (expr);                    \
    if (_st != CUBLAS_STATUS_SUCCESS) return lt_error(what, _st); \
  } while (0)

#define CUDA_CHECK_ST(what, expr)                   \
  do {                                              \
    cudaError_t _e = (expr);                        \
    if (_e != cudaSuccess) return cuda_error(what, _e); \
  } while (0)

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace

CublasLtFp8BlockScaled::~CublasLtFp8BlockScaled() { release(); }

void CublasLtFp8BlockScaled::release() {
  if (la_) cublasLtMatrixLayoutDestroy(la_);
  if (lb_) cublasLtMatrixLayoutDestroy(lb_);
  if (lc_) cublasLtMatrixLayoutDestroy(lc_);
  if (ld_) cublasLtMatrixLayoutDestroy(ld_);
  if (op_) cublasLtMatmulDescDestroy(op_);
  if (handle_) cublasLtDestroy(handle_);
  if (workspace_) cudaFree(workspace_);
  if (sfa_lt_) cudaFree(sfa_lt_);
  if (sfb_lt_) cudaFree(sfb_lt_);
  la_ = lb_ = lc_ = ld_ = nullptr;
  op_ = nullptr;
  handle_ = nullptr;
  workspace_ = nullptr;
  sfa_lt_ = sfb_lt_ = nullptr;
  lt_a_scale_ = lt_b_scale_ = nullptr;
  num_algos_ = chosen_ = 0;
  locked_ = false;
  scales_ready_ = false;
  note_.clear();
}

Status CublasLtFp8BlockScaled::set_scale_pointers(const float* a_scale, const float* b_scale) {
  if (a_scale != lt_a_scale_) {
    const void* p = a_scale;
    LT_CHECK("a_scale ptr", cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &p, sizeof(p)));
    lt_a_scale_ = a_scale;
  }
  if (b_scale != lt_b_scale_) {
    const void* p = b_scale;
    LT_CHECK("b_scale ptr", cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &p, sizeof(p)));
    lt_b_scale_ = b_scale;
  }
  return Status::Ok();
}

// "cuBLASLt blockscaled heuristic #i/n: algo A tile T stages S splitK K cluster C" (the ids are
// cuBLASLt's enums: cublasLtMatmulTile_t, cublasLtMatmulStages_t, cublasLtClusterShape_t).
void CublasLtFp8BlockScaled::describe(int index) {
  const cublasLtMatmulAlgo_t& algo = heuristics_[index].algo;
  int32_t algo_id = -1, splitk = 1;
  uint32_t tile = 0, stages = 0;
  uint16_t cluster = 0;
  size_t written = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_ID, &algo_id, sizeof(algo_id), &written);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile), &written);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof(stages), &written);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof(splitk), &written);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster, sizeof(cluster),
                                       &written);
  note_ = "cuBLASLt blockscaled (A=BLK128x128 of B, B=VEC128 of A) heuristic #" + std::to_string(index + 1) +
          "/" + std::to_string(num_algos_) + ": algo " + std::to_string(algo_id) + " tile " +
          std::to_string(tile) + " stages " + std::to_string(stages) + " splitK " + std::to_string(splitk) +
          " cluster " + std::to_string(cluster);
  if (index > 0) note_ += " (earlier answers NOT_SUPPORTED)";
}

// Row-major D[M,N] = A[M,K] . B[N,K]^T is, column-major, D^T[N,M] = B . A^T: cuBLASLt's "A" is
// our B (transposed, ld K), its "B" is our A (ld K), its D is N x M with ld N -- the "TN" layout
// FP8 requires. cuBLASLt's (m, n, k) are our (N, M, K).
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

  LT_CHECK("create", cublasLtCreate(&handle_));
  LT_CHECK("desc", cublasLtMatmulDescCreate(&op_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  LT_CHECK("transa", cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  LT_CHECK("transb", cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  // Block scaling requires the default (non-fast) accumulation.
  const int8_t fast = 0;
  LT_CHECK("fast_accum", cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof(fast)));
  const int32_t a_mode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;  // cuBLASLt A = our B
  const int32_t b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;      // cuBLASLt B = our A
  LT_CHECK("a_scale_mode", cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &a_mode,
                                                          sizeof(a_mode)));
  LT_CHECK("b_scale_mode", cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &b_mode,
                                                          sizeof(b_mode)));
  // Valid, aligned pointers for the heuristic; convert_scales() re-points them if needed.
  LOWBIT_RETURN_IF_ERROR(set_scale_pointers(sfb_lt_, sfa_lt_));

  const cudaDataType_t dt = out == OutType::kFP32 ? CUDA_R_32F : CUDA_R_16BF;
  LT_CHECK("layout a", cublasLtMatrixLayoutCreate(&la_, CUDA_R_8F_E4M3, k, n, k));
  LT_CHECK("layout b", cublasLtMatrixLayoutCreate(&lb_, CUDA_R_8F_E4M3, k, m, k));
  LT_CHECK("layout c", cublasLtMatrixLayoutCreate(&lc_, dt, n, m, n));
  LT_CHECK("layout d", cublasLtMatrixLayoutCreate(&ld_, dt, n, m, n));

  workspace_bytes_ = 32u << 20;
  CUDA_CHECK_ST("workspace allocation", cudaMalloc(&workspace_, workspace_bytes_));
  cublasLtMatmulPreference_t pref = nullptr;
  LT_CHECK("pref", cublasLtMatmulPreferenceCreate(&pref));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes_,
                                       sizeof(workspace_bytes_));
  int found = 0;
  const cublasStatus_t hs =
      cublasLtMatmulAlgoGetHeuristic(handle_, op_, la_, lb_, lc_, ld_, pref, kMaxAlgos, heuristics_, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (hs != CUBLAS_STATUS_SUCCESS || found == 0)
    return Status::Error(StatusCode::kCudaError,
                         "cuBLASLt block-scaled FP8 heuristic returned no algorithm (status " +
                             std::to_string(static_cast<int>(hs)) + ", M=" + std::to_string(m) +
                             " N=" + std::to_string(n) + " K=" + std::to_string(k) +
                             "; needs sm_90, cuBLAS >= 12.9, K a multiple of 16)");
  num_algos_ = found;
  chosen_ = 0;
  describe(0);
  return Status::Ok();
#endif
}

Status CublasLtFp8BlockScaled::convert_scales(const float* sfa, int64_t sfa_ld, const float* sfb, cudaStream_t s) {
  if (!op_) return Status::Invalid("cuBLASLt block-scaled: convert_scales before a successful plan");
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
  if (!op_ || num_algos_ == 0) return Status::Invalid("cuBLASLt block-scaled: run before a successful plan");
  if (!scales_ready_) return Status::Invalid("cuBLASLt block-scaled: run before convert_scales");
  const float alpha = 1.0f, beta = 0.0f;
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
    describe(chosen_);
  }
}

}  // namespace lowbit::bench
