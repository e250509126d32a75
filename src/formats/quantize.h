// Per-tensor E4M3 quantization on the host (tests and benchmark inputs): scale = amax / 448,
// q = e4m3(x / scale); the dequantized value is e4m3_to_float(q) * scale.
#pragma once

#include <cstdint>
#include <vector>

namespace lowbit::formats {

struct QuantizedE4M3 {
  std::vector<uint8_t> codes;
  float scale = 1.0f;
};

// Empty codes (scale 1) when x holds a non-finite value.
QuantizedE4M3 quantize_e4m3_per_tensor(const std::vector<float>& x);

// Per row per 128-wide K block (the "1x128" activation scaling of block-scaled GEMMs and the MoE
// gather stage): a = max(amax, 1e-12), scale = a / 448 and q = e4m3(x * (448 / a)) in FP32 (a
// multiply by one reciprocal per block, as DeepGEMM's reference cast does, instead of 128
// divisions). x is [rows, k] with k a multiple of 128; scales come out row-major [rows, k / 128].
// The device quantizer (formats/quantize_device.cuh) applies the same FP32 operations, so both
// give identical bytes.
constexpr float kBlockScaleFloor = 1e-12f;
// Per-tensor scales (E4M3 per tensor, the NVFP4 global scale) take amax at least this: below
// ~1e-33 the reciprocal scales overflow FP32, every value saturated and 0 * inf made zeros NaN.
// A tensor that small quantizes to (near) zero instead.
constexpr float kTensorAmaxFloor = 1e-30f;
struct QuantizedRows {
  std::vector<uint8_t> codes;   // [rows, k]
  std::vector<float> scales;    // [rows, k / 128]
};
// Empty output unless k is a multiple of 128 and x holds exactly rows * k values.
QuantizedRows quantize_e4m3_rows_1x128(const std::vector<float>& x, int64_t rows, int64_t k);

}  // namespace lowbit::formats
