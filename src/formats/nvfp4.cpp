#include "formats/nvfp4.h"

#include <algorithm>
#include <cmath>

#include "formats/e4m3.h"
#include "formats/quantize.h"

namespace lowbit::formats {

float e2m1_to_float(uint8_t code) {
  static const float kMag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float v = kMag[code & 0x7];
  return (code & 0x8) ? -v : v;
}

uint8_t float_to_e2m1(float x) {
  if (std::isnan(x)) return 0x7;
  const uint8_t sign = std::signbit(x) ? 0x8 : 0x0;
  const float a = std::fabs(x);
  // Midpoints between neighbouring magnitudes; at a tie the even code (mantissa bit 0) wins.
  static const float kMag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  uint8_t code = 7;
  for (uint8_t c = 0; c < 7; ++c) {
    const float mid = 0.5f * (kMag[c] + kMag[c + 1]);
    if (a < mid || (a == mid && (c % 2 == 0))) {
      code = c;
      break;
    }
  }
  return sign | code;
}

float nvfp4_scale_to_float(uint8_t sf) {
  const uint8_t magnitude = sf & 0x7F;
  return magnitude == 0x7F ? 480.0f : e4m3_to_float(magnitude);
}

Nvfp4Tensor quantize_nvfp4(const float* x, int64_t rows, int64_t cols) {
  Nvfp4Tensor t;
  // Whole 16-element blocks only: a partial block has no scale to go with it (and was left
  // unquantized, then read past the scales by the dequantizer).
  if (rows < 0 || cols < 0 || cols % kNvfp4Block != 0) return t;
  for (int64_t i = 0; i < rows * cols; ++i)
    if (!std::isfinite(x[i])) return t;
  t.rows = rows;
  t.cols = cols;
  t.packed.assign(static_cast<size_t>(rows * cols / 2), 0);
  const int64_t kb = cols / kNvfp4Block;
  t.scales.assign(static_cast<size_t>(rows * kb), 0);
  float amax = 0.0f;
  for (int64_t i = 0; i < rows * cols; ++i) amax = std::max(amax, std::fabs(x[i]));
  // Floored so enc and enc / s (s down to E4M3's smallest subnormal) stay finite.
  if (amax > 0.0f) amax = std::max(amax, kTensorAmaxFloor);
  const float enc = amax > 0.0f ? (kE2M1Max * kE4M3Max) / amax : 1.0f;
  t.global_scale = amax > 0.0f ? amax / (kE2M1Max * kE4M3Max) : 1.0f;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < kb; ++b) {
      const float* blk = x + r * cols + b * kNvfp4Block;
      float bamax = 0.0f;
      for (int i = 0; i < kNvfp4Block; ++i) bamax = std::max(bamax, std::fabs(blk[i]));
      const uint8_t sf = float_to_e4m3(bamax / kE2M1Max * enc);
      t.scales[static_cast<size_t>(r * kb + b)] = sf;
      const float s = e4m3_to_float(sf);
      const float mul = s > 0.0f ? enc / s : 0.0f;
      for (int i = 0; i < kNvfp4Block; ++i) {
        const uint8_t q = s > 0.0f ? float_to_e2m1(blk[i] * mul) : 0;
        const int64_t e = r * cols + b * kNvfp4Block + i;
        uint8_t& byte = t.packed[static_cast<size_t>(e / 2)];
        byte = (e % 2 == 0) ? static_cast<uint8_t>((byte & 0xF0) | q) : static_cast<uint8_t>((byte & 0x0F) | (q << 4));
      }
    }
  }
  return t;
}

std::vector<float> dequantize_nvfp4(const Nvfp4Tensor& t) {
  const int64_t kb = t.cols / kNvfp4Block;
  if (t.rows < 0 || t.cols < 0 || t.cols % kNvfp4Block != 0 ||
      t.packed.size() != static_cast<size_t>(t.rows * t.cols / 2) || t.scales.size() != static_cast<size_t>(t.rows * kb))
    return {};  // not a tensor quantize_nvfp4 makes
  std::vector<float> out(static_cast<size_t>(t.rows * t.cols));
  for (int64_t r = 0; r < t.rows; ++r)
    for (int64_t c = 0; c < t.cols; ++c) {
      const int64_t e = r * t.cols + c;
      const uint8_t byte = t.packed[static_cast<size_t>(e / 2)];
      const uint8_t q = (e % 2 == 0) ? (byte & 0x0F) : (byte >> 4);
      const float s = nvfp4_scale_to_float(t.scales[static_cast<size_t>(r * kb + c / kNvfp4Block)]);
      out[static_cast<size_t>(e)] = e2m1_to_float(q) * s * t.global_scale;
    }
  return out;
}

size_t nvfp4_scale_offset_swizzled(int64_t row, int64_t kblock, int64_t kblocks) {
  const int64_t atoms_k = (kblocks + 3) / 4;
  const int64_t atom = (row / 128) * atoms_k + kblock / 4;
  const int64_t r = row % 128;
  return static_cast<size_t>(atom * 512 + 16 * (r % 32) + 4 * (r / 32) + kblock % 4);
}

size_t nvfp4_scales_swizzled_bytes(int64_t rows, int64_t kblocks) {
  return static_cast<size_t>(((rows + 127) / 128) * ((kblocks + 3) / 4) * 512);
}

std::vector<uint8_t> swizzle_nvfp4_scales(const uint8_t* rowmajor, int64_t rows, int64_t kblocks) {
  std::vector<uint8_t> out(nvfp4_scales_swizzled_bytes(rows, kblocks), 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < kblocks; ++b) out[nvfp4_scale_offset_swizzled(r, b, kblocks)] = rowmajor[r * kblocks + b];
  return out;
}

}  // namespace lowbit::formats
