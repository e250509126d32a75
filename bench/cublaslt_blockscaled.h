// The cuBLASLt block-scaled FP8 baseline (sm_90, cuBLAS >= 12.9): the DeepSeek/DeepGEMM recipe
//   D[m][n] = sum_kb sfa(m, kb) * sfb(n / 128, kb) * sum_{k in block kb} A[m][k] * B[n][k]
// with A E4M3 [M,K] and B E4M3 [N,K] row-major (K contiguous), D BF16 or FP32 [M,N] row-major,
// kblocks = ceil(K / 128), and our scale layouts:
//   sfa (1x128 per token):   (m, kb)  at sfa[kb * sfa_ld + m], sfa_ld >= M (M contiguous)
//   sfb (128x128 per block): (nb, kb) at sfb[nb * kblocks + kb]
//
// Mapped, as in cublaslt_fp8.h, to cuBLASLt's column-major "TN" form: its A := our B (TRANSA=T),
// its B := our A, its D is N x M col-major (= our row-major D), so its (m, n, k) = our (N, M, K).
// cuBLASLt's A therefore gets CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F and its B gets
// CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F. The layouts cuBLASLt reads (cuBLAS docs, "128-element
// 1D and 128x128 2D Block Scaling For FP8 Data Types" -> "Scaling factors layouts"; in cuBLASLt's
// own m/n/k, independent of TRANSA/TRANSB):
//   VEC128_32F on B:     "N-major, shape N x L" (L = ceil(K/128)): element (j, kb) at
//                        kb * n_lt + j, i.e. for us (m, kb) at kb * M + m -- ours with sfa_ld == M.
//   BLK128x128_32F on A: "K-major, shape L4 x ceil(M/128)", column stride L4 = round_up(L, 4):
//                        element (kb, ib) at ib * L4 + kb, i.e. for us (nb, kb) at nb * L4 + kb --
//                        ours exactly when kblocks % 4 == 0.
//   All scale start addresses 16-byte aligned; cuBLASLt's M and N (our N and M) multiples of 4.
// convert_scales() passes our buffers through untouched when they already match (and are 16-byte
// aligned); otherwise it rewrites them (cudaMemcpy2DAsync) into buffers allocated by plan().
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cublaslt_plan.h"
#include "lowbit/gemm.h"
#include "lowbit/status.h"

namespace lowbit::bench {

class CublasLtFp8BlockScaled {
 public:
  CublasLtFp8BlockScaled() = default;
  ~CublasLtFp8BlockScaled();
  CublasLtFp8BlockScaled(const CublasLtFp8BlockScaled&) = delete;
  CublasLtFp8BlockScaled& operator=(const CublasLtFp8BlockScaled&) = delete;

  // Creates the handle, the plan for this shape, the workspace and the cuBLASLt-layout scale
  // buffers (setup, never timed). M and N must be multiples of 4 (cuBLASLt rule for these modes).
  // No algorithm from the heuristic (e.g. not sm_90, cuBLAS < 12.9, K not a multiple of 16) is a
  // kCudaError Status, never a crash.
  Status plan(int64_t m, int64_t n, int64_t k, OutType out);
  // Brings our scales into cuBLASLt's layout (enqueued on `s`; no-op if already identical). The
  // buffers passed through untouched must stay alive and unchanged until the matmuls ran.
  Status convert_scales(const float* sfa, int64_t sfa_ld, const float* sfb, cudaStream_t s);
  // Enqueues one matmul (alpha 1, beta 0) on the stream, with the scales of the last convert_scales.
  Status run(const void* a, const void* b, void* d, cudaStream_t s);
  const std::string& algo_note() const { return lt_.note(); }

 private:
  void release();
  Status set_scale_pointers(const float* a_scale, const float* b_scale);

  LtTnPlan lt_;
  int64_t m_ = 0, n_ = 0, k_ = 0;
  int64_t kblocks_ = 0;   // L  = ceil(K / 128)
  int64_t kblocks4_ = 0;  // L4 = round_up(L, 4)
  int64_t nblocks_ = 0;   // ceil(N / 128)
  float* sfb_lt_ = nullptr;  // [nblocks][L4], zero padded (cuBLASLt A scales)
  float* sfa_lt_ = nullptr;  // [L][M] (cuBLASLt B scales)
  const float* lt_a_scale_ = nullptr;  // what the descriptor points at now
  const float* lt_b_scale_ = nullptr;
  bool scales_ready_ = false;
};

}  // namespace lowbit::bench
