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

QuantizedE4M3 quantize_e4m3_per_tensor(const std::vector<float>& x);

}  // namespace lowbit::formats
