#include "formats/quantize.h"

#include <algorithm>
#include <cmath>

#include "formats/e4m3.h"

namespace lowbit::formats {

QuantizedE4M3 quantize_e4m3_per_tensor(const std::vector<float>& x) {
  for (float v : x)
    if (!std::isfinite(v)) return {};  // an infinite amax would make every code NaN
  float amax = 0.0f;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  QuantizedE4M3 q;
  q.scale = amax > 0.0f ? std::max(amax, kTensorAmaxFloor) / kE4M3Max : 1.0f;
  q.codes.resize(x.size());
  const float inv = 1.0f / q.scale;
  for (size_t i = 0; i < x.size(); ++i) q.codes[i] = float_to_e4m3(x[i] * inv);
  return q;
}

QuantizedRows quantize_e4m3_rows_1x128(const std::vector<float>& x, int64_t rows, int64_t k) {
  QuantizedRows q;
  // A partial block would be left unquantized, a short x read past its end.
  if (rows < 0 || k < 0 || k % 128 != 0 || x.size() != static_cast<size_t>(rows * k)) return q;
  const int64_t kb = k / 128;
  q.codes.resize(static_cast<size_t>(rows * k));
  q.scales.resize(static_cast<size_t>(rows * kb));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < kb; ++b) {
      const float* v = x.data() + r * k + b * 128;
      float amax = 0.0f;
      for (int i = 0; i < 128; ++i) amax = std::max(amax, std::fabs(v[i]));
      const float a = std::max(amax, kBlockScaleFloor);
      const float inv = kE4M3Max / a;
      q.scales[r * kb + b] = a / kE4M3Max;
      for (int i = 0; i < 128; ++i) q.codes[r * k + b * 128 + i] = float_to_e4m3(v[i] * inv);
    }
  }
  return q;
}

}  // namespace lowbit::formats
