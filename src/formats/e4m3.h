// E4M3 (OCP FP8 "e4m3fn": 1 sign, 4 exponent bits with bias 7, 3 mantissa bits, no infinities,
// NaN = S.1111.111, largest finite 448). Host reference conversions, bit-exact with the
// hardware's saturating round-to-nearest-even conversion (cvt.rn.satfinite.e4m3x2.f32).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace lowbit::formats {

constexpr float kE4M3Max = 448.0f;

// Decodes one E4M3 byte. NaN codes decode to NaN.
inline float e4m3_to_float(uint8_t code) {
  const int sign = code >> 7;
  const int exp = (code >> 3) & 0xF;
  const int man = code & 0x7;
  float v;
  if (exp == 0xF && man == 0x7) {
    v = std::nanf("");
  } else if (exp == 0) {
    v = std::ldexp(static_cast<float>(man), -9);  // subnormal: man/8 * 2^-6
  } else {
    v = std::ldexp(1.0f + man / 8.0f, exp - 7);
  }
  return sign ? -v : v;
}

// Encodes a float with round-to-nearest-even and saturation to +-448; NaN -> 0x7F.
inline uint8_t float_to_e4m3(float x) {
  if (std::isnan(x)) return 0x7F;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const double a = std::fabs(static_cast<double>(x));
  if (a >= 448.0) return sign | 0x7E;
  if (a < std::ldexp(1.0, -6)) {
    // Subnormal range: a multiple of 2^-9; nearbyint rounds half to even.
    const int q = static_cast<int>(std::nearbyint(std::ldexp(a, 9)));
    return sign | static_cast<uint8_t>(q);  // q == 8 is the smallest normal, 0x08
  }
  int e2;
  (void)std::frexp(a, &e2);   // a = f * 2^e2, f in [0.5, 1)
  int e = e2 - 1;             // a = m * 2^e, m in [1, 2)
  int q = static_cast<int>(std::nearbyint((std::ldexp(a, -e) - 1.0) * 8.0));
  if (q == 8) {
    q = 0;
    ++e;
  }
  const int biased = e + 7;
  if (biased > 15 || (biased == 15 && q == 7)) return sign | 0x7E;
  return sign | static_cast<uint8_t>((biased << 3) | q);
}

}  // namespace lowbit::formats
