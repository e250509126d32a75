// IEEE binary16 host conversions (reference side; the device uses cuda_fp16).
#pragma once

#include <cmath>
#include <cstdint>

namespace lowbit::formats {

inline float fp16_to_float(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 0x1F, man = h & 0x3FF;
  float v;
  if (exp == 0x1F) v = man ? std::nanf("") : INFINITY;
  else if (exp == 0) v = std::ldexp(static_cast<float>(man), -24);
  else v = std::ldexp(1.0f + man / 1024.0f, exp - 15);
  return sign ? -v : v;
}

// Round to nearest even; overflow to infinity, NaN to a quiet NaN.
inline uint16_t float_to_fp16(float x) {
  if (std::isnan(x)) return 0x7E00;
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  if (std::isinf(x)) return sign | 0x7C00;  // frexp leaves no exponent for infinity
  const double a = std::fabs(static_cast<double>(x));
  if (a < std::ldexp(1.0, -14)) {  // subnormal: a multiple of 2^-24
    return sign | static_cast<uint16_t>(std::nearbyint(std::ldexp(a, 24)));  // 1024 carries into the normal range
  }
  int e = 0;
  std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1)
  const int exp = e - 1;  // a in [2^exp, 2^(exp+1))
  if (exp > 15) return sign | 0x7C00;
  const double man = std::nearbyint(std::ldexp(a, 10 - exp));  // in [1024, 2048]
  uint32_t bits = static_cast<uint32_t>(exp + 15) << 10 | (static_cast<uint32_t>(man) - 1024);
  if (man >= 2048) bits = static_cast<uint32_t>(exp + 16) << 10;  // rounded up to the next binade
  if (bits >= 0x7C00) return sign | 0x7C00;
  return sign | static_cast<uint16_t>(bits);
}

}  // namespace lowbit::formats
