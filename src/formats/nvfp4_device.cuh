// NVFP4 on the device: E2M1 pairs and E4M3 scales to BF16 by bit placement (Hopper has no
// cvt for E2M1). Exact: every E2M1 x E4M3 product has at most 6 significant bits and lies
// between 2^-10 and 2880 (6 x 480, scale byte 0x7F), well inside BF16.
#pragma once

#include <cuda_bf16.h>

#include <cfloat>
#include <cstdint>

namespace lowbit::formats {

// A pair of E2M1 codes -> BF16x2, each equal to the E2M1 value times 2^-126: the code's e1 e0 m
// bits land on the lowest two exponent bits and the top mantissa bit, so code 001 (0.5) becomes
// the subnormal 2^-127 and the rest normal numbers -- one multiply then restores any scale
// exactly. The pairs come four to a 32-bit word (the prepacked weight layout): pair u has its
// low code at bits 4u..4u+3 and its high code at bits 16+4u..16+4u+3, so each field moves to its
// place with one shift and one mask (sign to bit 15 / 31, e1 e0 m to bits 6..8 / 22..24): four
// integer operations per pair, where unpacking a plain byte took nine.
template <int u>
__device__ __forceinline__ uint32_t e2m1x2_from_word_scaled(uint32_t x) {
  static_assert(u >= 0 && u < 4, "four pairs per word");
  constexpr int kSign = 12 - 4 * u;  // >= 0
  constexpr int kBits = 6 - 4 * u;   // 6, 2, -2, -6
  const uint32_t sign = (x << kSign) & 0x80008000u;
  if constexpr (kBits >= 0) {
    return sign | ((x << kBits) & 0x01C001C0u);
  } else {
    return sign | ((x >> -kBits) & 0x01C001C0u);
  }
}

// Two E4M3 scales (bits 0..7 and 8..15 of `two`) -> BF16x2 of each scale times 2^118. The 7
// magnitude bits placed at BF16 bits 4..10 read as scale * 2^-120 (E4M3 subnormals included:
// bias 7 vs 127, and the subnormal ranges line up the same way); two multiplies by 2^119 follow
// (2^238 is not a BF16). The sign bit is dropped: NVFP4 scales are never negative.
__device__ __forceinline__ __nv_bfloat162 e4m3x2_to_bf16x2_times_2pow118(uint32_t two) {
  const uint32_t bits = ((two & 0x7Fu) << 4) | ((two & 0x7F00u) << 12);
  __nv_bfloat162 v = *reinterpret_cast<const __nv_bfloat162*>(&bits);
  const __nv_bfloat162 p119 = __floats2bfloat162_rn(6.646139978924579e35f, 6.646139978924579e35f);  // 2^119
  v = __hmul2(v, p119);
  return __hmul2(v, p119);
}

// One E4M3 scale byte -> FP32, exactly as the weights' decode above reads it (and as
// formats::nvfp4_scale_to_float): the 7 magnitude bits at FP32 bits 20..26 read as scale *
// 2^-120 (subnormals included), so 0x7F is 480 and the sign bit is dropped.
__device__ __forceinline__ float nvfp4_scale_to_float(uint32_t byte) {
  return __uint_as_float((byte & 0x7Fu) << 20) * 0x1p120f;  // * 2^120
}

// E2M1 value * scale * 2^-8 in BF16: (value * 2^-126) * (scale * 2^118). The GEMM folds the
// 2^8 back into its FP32 output scale.
constexpr float kNvfp4DequantCompensation = 256.0f;

// The GEMMs apply g_a * g_b * kNvfp4DequantCompensation (g_a = 1 for BF16 activations) as one
// FP32 factor. Each global scale must be finite and > 0, and that product a normal FP32 value:
// past the range it rounds to inf or 0, and every output with it (the dense and the grouped
// calls refuse such scales).
__host__ __device__ inline bool nvfp4_global_scales_ok(float g_a, float g_b) {
  if (!(g_a > 0.0f && g_a <= FLT_MAX && g_b > 0.0f && g_b <= FLT_MAX)) return false;
  const double factor = static_cast<double>(g_a) * g_b * kNvfp4DequantCompensation;
  return factor >= FLT_MIN && factor <= FLT_MAX;
}

}  // namespace lowbit::formats
