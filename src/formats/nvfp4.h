// NVFP4 (NVIDIA's 4-bit format), host reference: E2M1 values {0, 0.5, 1, 1.5, 2, 3, 4, 6} with a
// sign bit, two per byte (low nibble first), one E4M3 scale per 16 consecutive elements along a
// row, one FP32 global scale per tensor. A value dequantizes as e2m1 * e4m3_scale * global_scale.
// The device quantizer (issue 5) must reproduce quantize_nvfp4 bit for bit; keep the operation
// order documented here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace lowbit::formats {

constexpr float kE2M1Max = 6.0f;
constexpr int kNvfp4Block = 16;

// Decodes a 4-bit E2M1 code (bit 3 sign, bits 2..1 exponent, bit 0 mantissa).
float e2m1_to_float(uint8_t code);

// Encodes with round-to-nearest-even, saturating to +-6 (as cvt.rn.satfinite.e2m1x2.f32).
// NaN encodes as +6, like the hardware conversion.
uint8_t float_to_e2m1(float x);

// An NVFP4 scale byte's value. Scales are unsigned E4M3 magnitudes: the sign bit is ignored and
// 0x7F (E4M3's NaN) reads as 480, the value of its bits, as the GEMM's bit-placement decode
// reads it. quantize_nvfp4 writes neither; a checkpoint might, and both GEMM operands (weights
// and NVFP4 activations) then decode it alike.
float nvfp4_scale_to_float(uint8_t sf);

struct Nvfp4Tensor {
  int64_t rows = 0;
  int64_t cols = 0;                 // a multiple of 16
  std::vector<uint8_t> packed;      // [rows, cols / 2], element 2j in the low nibble of byte j
  std::vector<uint8_t> scales;      // E4M3 [rows, cols / 16], row-major
  float global_scale = 1.0f;        // dequantization scale: amax' / (6 * 448), 1 when amax == 0
};

// The standard recipe, per tensor:
//   amax = max |x|;  amax' = max(amax, kTensorAmaxFloor) (quantize.h)
//   g = amax' / (6 * 448) (1 if amax == 0);  enc = (6 * 448) / amax' (1 if amax == 0)
// per block of 16 along a row:
//   sf = e4m3_rne_sat(block_amax / 6 * enc);  s = e4m3_to_float(sf)
//   q  = s > 0 ? e2m1_rne_sat(x * (enc / s)) : 0      (enc / s computed once per block, in FP32)
// cols must be a multiple of 16 (whole blocks) and every value finite; otherwise the result is
// an empty tensor (an infinite amax zeroed every scale and made g infinite; NaN is no value).
Nvfp4Tensor quantize_nvfp4(const float* x, int64_t rows, int64_t cols);

// x_hat[r, c] = e2m1(q) * nvfp4_scale_to_float(sf) * g, in FP32; empty for a tensor
// quantize_nvfp4 would not make.
std::vector<float> dequantize_nvfp4(const Nvfp4Tensor& t);

// Byte offset of the scale of (row, k-block) in the 128x4-atom swizzled layout that cuBLASLt and
// CUTLASS use for block scaling: inside a 128-row x 4-column atom, 16 * (r % 32) + 4 * (r / 32) + c;
// atoms run along K first, then along rows. kblocks = cols / 16.
size_t nvfp4_scale_offset_swizzled(int64_t row, int64_t kblock, int64_t kblocks);

// Bytes of the swizzled scale tensor: rows padded to 128 and k-blocks to 4.
size_t nvfp4_scales_swizzled_bytes(int64_t rows, int64_t kblocks);

// Row-major [rows, kblocks] scales -> swizzled layout (padding bytes zero).
std::vector<uint8_t> swizzle_nvfp4_scales(const uint8_t* rowmajor, int64_t rows, int64_t kblocks);

}  // namespace lowbit::formats
