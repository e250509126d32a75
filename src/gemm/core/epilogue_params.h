// What a GEMM epilogue fuses, in the order it applies them (host and device see the same struct):
//   v = alpha * a_scale * b_scale * row_scale[row] * col_scale[col] * acc
//   v += bias[col]                          (bias)
//   v += row_bcast[row % row_period][col]   (row_bcast: e.g. a ViT positional embedding)
//   v = activation(v)                       (none, GELU (erf), SiLU)
//   v += residual[row][col]                 (residual: a full [M, N] tensor)
// A new fused operation adds a field here and its step in the epilogue (gemm/core/epilogue.cuh).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace lowbit::gemm {

enum class EpilogueActivation : int { kNone = 0, kGelu = 1, kSilu = 2 };

struct EpilogueParams {
  float alpha;
  const float* a_scale;            // may be null
  const float* b_scale;            // may be null
  const float* row_scale;          // [m] or null: per-token scales of A (the staged epilogue only)
  const float* col_scale;          // [n] or null: per-channel scales of B (the staged epilogue only)
  const __nv_bfloat16* bias;       // [n] or null
  const __nv_bfloat16* row_bcast;  // [row_period, n] or null
  int row_period;
  const __nv_bfloat16* residual;   // [m, n] or null
  int activation;                  // EpilogueActivation
};

// Row bytes of one staged epilogue chunk (and of the output tensor map's box, swizzled to the
// same width): 128 where the tile row is a multiple of it, else the widest of 64 or 32 that
// divides it (block_n = 176: 32 in BF16, 64 in FP32).
constexpr int epi_chunk_bytes(int block_n, int out_bytes) {
  return (block_n * out_bytes) % 128 == 0 ? 128 : (block_n * out_bytes) % 64 == 0 ? 64 : 32;
}

}  // namespace lowbit::gemm
