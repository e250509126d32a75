#include "formats/quantize.h"

#include <algorithm>
#include <cmath>

#include "formats/e4m3.h"

namespace lowbit::formats {

QuantizedE4M3 quantize_e4m3_per_tensor(const std::vector<float>& x) {
  float amax = 0.0f;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  QuantizedE4M3 q;
  q.scale = amax > 0.0f ? amax / kE4M3Max : 1.0f;
  q.codes.resize(x.size());
  const float inv = 1.0f / q.scale;
  for (size_t i = 0; i < x.size(); ++i) q.codes[i] = float_to_e4m3(x[i] * inv);
  return q;
}

}  // namespace lowbit::formats
