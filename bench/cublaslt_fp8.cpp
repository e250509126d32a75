#include "cublaslt_fp8.h"

namespace lowbit::bench {

// Our a_scale / b_scale are cuBLASLt's B / A scale pointers (cublaslt_plan.h: the TN mapping).
Status CublasLtFp8::plan(int64_t m, int64_t n, int64_t k, OutType out, bool with_bias, const float* a_scale,
                         const float* b_scale, bool fast_accum) {
  LOWBIT_RETURN_IF_ERROR(lt_.create(fast_accum));
  cublasLtMatmulDesc_t op = lt_.desc();
  if (b_scale)
    LOWBIT_LT_CHECK("a_scale", cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &b_scale,
                                                              sizeof(b_scale)));
  if (a_scale)
    LOWBIT_LT_CHECK("b_scale", cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &a_scale,
                                                              sizeof(a_scale)));
  if (with_bias) LOWBIT_RETURN_IF_ERROR(set_bias_epilogue(out));
  return lt_.finish(m, n, k, out, fast_accum ? "cuBLASLt FP8 fast-accum" : "cuBLASLt FP8");
}

// The TN mapping again: cuBLASLt's A is our B, so its A scale vector (its M = our N entries) is
// our b_row_scale and its B scale vector our a_row_scale.
Status CublasLtFp8::plan_rowwise(int64_t m, int64_t n, int64_t k, OutType out, bool with_bias,
                                 const float* a_row_scale, const float* b_row_scale) {
#if !defined(CUBLAS_VERSION) || CUBLAS_VERSION < 120900
  (void)m, (void)n, (void)k, (void)out, (void)with_bias, (void)a_row_scale, (void)b_row_scale;
  return Status::Error(StatusCode::kCudaError, "cuBLASLt FP8 rowwise (OUTER_VEC_32F scales) needs cuBLAS >= 12.9");
#else
  if (!a_row_scale || !b_row_scale) return Status::Invalid("cuBLASLt FP8 rowwise: both scale vectors are required");
  LOWBIT_RETURN_IF_ERROR(lt_.create());
  cublasLtMatmulDesc_t op = lt_.desc();
  const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
  LOWBIT_LT_CHECK("a_scale_mode",
                  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof(mode)));
  LOWBIT_LT_CHECK("b_scale_mode",
                  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof(mode)));
  LOWBIT_LT_CHECK("b_row_scale", cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &b_row_scale,
                                                                sizeof(b_row_scale)));
  LOWBIT_LT_CHECK("a_row_scale", cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &a_row_scale,
                                                                sizeof(a_row_scale)));
  if (with_bias) LOWBIT_RETURN_IF_ERROR(set_bias_epilogue(out));
  return lt_.finish(m, n, k, out, "cuBLASLt FP8 rowwise");
#endif
}

Status CublasLtFp8::set_bias_epilogue(OutType out) {
  cublasLtMatmulDesc_t op = lt_.desc();
  const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
  LOWBIT_LT_CHECK("epilogue", cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
  const cudaDataType_t bt = out == OutType::kFP16 ? CUDA_R_16F : CUDA_R_16BF;
  LOWBIT_LT_CHECK("bias type",
                  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt)));
  return Status::Ok();
}

Status CublasLtFp8::run(const void* a, const void* b, void* d, const void* bias, float alpha, cudaStream_t s) {
  if (bias)
    LOWBIT_LT_CHECK("bias ptr",
                    cublasLtMatmulDescSetAttribute(lt_.desc(), CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  return lt_.matmul(a, b, d, alpha, s);
}

Status CublasLtF16::plan(int64_t m, int64_t n, int64_t k) {
  LOWBIT_RETURN_IF_ERROR(lt_.create());
  return lt_.finish_types(m, n, k, CUDA_R_16F, CUDA_R_16F, "cuBLASLt FP16");
}

}  // namespace lowbit::bench
