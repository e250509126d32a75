#include "cublaslt_plan.h"

#include <string>

namespace lowbit::bench {

Status lt_error(const char* what, cublasStatus_t st) {
  return Status::Error(StatusCode::kCudaError, std::string("cuBLASLt ") + what + " failed: status " +
                                                   std::to_string(static_cast<int>(st)));
}

void LtTnPlan::release() {
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
  num_algos_ = chosen_ = 0;
  locked_ = false;
  note_.clear();
}

Status LtTnPlan::create(bool fast_accum) {
  release();
  LOWBIT_LT_CHECK("create", cublasLtCreate(&handle_));
  LOWBIT_LT_CHECK("desc", cublasLtMatmulDescCreate(&op_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  LOWBIT_LT_CHECK("transa", cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  LOWBIT_LT_CHECK("transb", cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  const int8_t fast = fast_accum ? 1 : 0;  // 0: FP32 promotion, as lowbit does (and block scaling requires)
  LOWBIT_LT_CHECK("fast_accum",
                  cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof(fast)));
  return Status::Ok();
}

Status LtTnPlan::finish(int64_t m, int64_t n, int64_t k, OutType out, const char* label) {
  const cudaDataType_t dt = out == OutType::kFP32 ? CUDA_R_32F : out == OutType::kFP16 ? CUDA_R_16F : CUDA_R_16BF;
  return finish_types(m, n, k, CUDA_R_8F_E4M3, dt, label);
}

Status LtTnPlan::finish_types(int64_t m, int64_t n, int64_t k, cudaDataType_t in, cudaDataType_t dt,
                              const char* label) {
  label_ = label;
  LOWBIT_LT_CHECK("layout a", cublasLtMatrixLayoutCreate(&la_, in, k, n, k));
  LOWBIT_LT_CHECK("layout b", cublasLtMatrixLayoutCreate(&lb_, in, k, m, k));
  LOWBIT_LT_CHECK("layout c", cublasLtMatrixLayoutCreate(&lc_, dt, n, m, n));
  LOWBIT_LT_CHECK("layout d", cublasLtMatrixLayoutCreate(&ld_, dt, n, m, n));
  workspace_bytes_ = 32u << 20;
  if (cudaMalloc(&workspace_, workspace_bytes_) != cudaSuccess)
    return Status::Error(StatusCode::kCudaError, "cuBLASLt workspace allocation failed");
  cublasLtMatmulPreference_t pref = nullptr;
  LOWBIT_LT_CHECK("pref", cublasLtMatmulPreferenceCreate(&pref));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes_,
                                       sizeof(workspace_bytes_));
  int found = 0;
  const cublasStatus_t hs =
      cublasLtMatmulAlgoGetHeuristic(handle_, op_, la_, lb_, lc_, ld_, pref, kMaxAlgos, heuristics_, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (hs != CUBLAS_STATUS_SUCCESS || found == 0)
    return Status::Error(StatusCode::kCudaError,
                         label_ + ": the heuristic returned no algorithm (status " +
                             std::to_string(static_cast<int>(hs)) + ", M=" + std::to_string(m) + " N=" +
                             std::to_string(n) + " K=" + std::to_string(k) + ")");
  num_algos_ = found;
  chosen_ = 0;
  describe();
  return Status::Ok();
}

Status LtTnPlan::matmul(const void* a, const void* b, void* d, float alpha, cudaStream_t s) {
  if (!ready()) return Status::Invalid(label_ + ": run before a successful plan");
  const float beta = 0.0f;
  for (;;) {
    const cublasStatus_t st = cublasLtMatmul(handle_, op_, &alpha, b, la_, a, lb_, &beta, d, lc_, d, ld_,
                                             &heuristics_[chosen_].algo, workspace_, workspace_bytes_, s);
    if (st == CUBLAS_STATUS_SUCCESS) {
      locked_ = true;
      return Status::Ok();
    }
    if (st != CUBLAS_STATUS_NOT_SUPPORTED || locked_ || chosen_ + 1 >= num_algos_) return lt_error("matmul", st);
    ++chosen_;
    describe();
  }
}

void LtTnPlan::describe() {
  const cublasLtMatmulAlgo_t& algo = heuristics_[chosen_].algo;
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
  note_ = label_ + " heuristic #" + std::to_string(chosen_ + 1) + "/" + std::to_string(num_algos_) + ": algo " +
          std::to_string(algo_id) + " tile " + std::to_string(tile) + " stages " + std::to_string(stages) +
          " splitK " + std::to_string(splitk) + " cluster " + std::to_string(cluster);
  if (chosen_ > 0) note_ += " (earlier answers NOT_SUPPORTED)";
}

}  // namespace lowbit::bench
