// Activation quantization for the per-token FP8 GEMM (fp8_gemm's a_row_scale): vLLM's dynamic
// per-token scheme, on the device and stream-ordered. Each row r of x gets
//   a = max(amax(row), 1e-30)  (a row of zeros: a = 448, scale 1)
//   scales[r] = a / 448,  q[r][c] = e4m3(x[r][c] * (448 / a))  (round to nearest even, saturating)
// so x ~ q * scales[r]. lowbit.quantize_fp8_per_token (Python) computes the same codes.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "lowbit/status.h"

namespace lowbit {

// x: BF16 [m, k] row-major, 16-byte aligned, k a multiple of 16; q: E4M3 [m, k]; scales: FP32 [m].
// A row holding NaN or Inf quantizes to NaN codes (E4M3's NaN) and a NaN scale, so the GEMM's
// outputs of that row are NaN, never silently finite.
Status quantize_fp8_per_token(const void* x, int64_t m, int64_t k, void* q, float* scales, cudaStream_t stream);

// The SwiGLU MLP's activation between its gate/up and down projections, fused with the
// quantization: v[r][c] = silu(gate_up[r][c]) * gate_up[r][inter + c] for c < inter (the gate in
// the first half of each row, the up projection in the second, as vLLM lays out its merged
// gate_up weight), then quantized per token as above. gate_up: BF16 [m, 2 * inter], inter a
// multiple of 16; q: E4M3 [m, inter]; scales: FP32 [m]. SiLU and the product are computed in
// FP32 from the BF16 inputs.
Status silu_mul_quantize_fp8_per_token(const void* gate_up, int64_t m, int64_t inter, void* q, float* scales,
                                       cudaStream_t stream);

}  // namespace lowbit
