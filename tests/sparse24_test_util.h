// Test-side helpers for the 2:4 sparse GEMM: random 2:4 matrices as raw E4M3 / F16 bits, and an
// independent decoder of lowbit's prepacked format (formats/sparse24_layout.h) back to dense.
#pragma once

#include <cstdint>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "formats/e4m3.h"
#include "formats/fp16.h"
#include "formats/sparse24_layout.h"
#include "lowbit/sparse.h"

namespace lowbit_test {

using lowbit::SparseType;
using lowbit::formats::Sparse24Type;

inline Sparse24Type format_of(SparseType t) {
  return t == SparseType::kE4M3 ? Sparse24Type::kE4M3 : Sparse24Type::kF16;
}
inline int elem_bytes(SparseType t) { return t == SparseType::kE4M3 ? 1 : 2; }

inline uint32_t encode(SparseType t, float v) {
  return t == SparseType::kE4M3 ? lowbit::formats::float_to_e4m3(v) : lowbit::formats::float_to_fp16(v);
}
inline float decode(SparseType t, uint32_t bits) {
  return t == SparseType::kE4M3 ? lowbit::formats::e4m3_to_float(static_cast<uint8_t>(bits))
                                : lowbit::formats::fp16_to_float(static_cast<uint16_t>(bits));
}

// A [rows, cols] matrix of raw element bits (1 or 2 bytes each).
struct RawMatrix {
  SparseType type;
  int64_t rows = 0, cols = 0;
  std::vector<uint8_t> bytes;
  uint32_t get(int64_t r, int64_t c) const {
    uint32_t v = 0;
    std::memcpy(&v, bytes.data() + (r * cols + c) * elem_bytes(type), elem_bytes(type));
    return v;
  }
  void set(int64_t r, int64_t c, uint32_t v) {
    std::memcpy(bytes.data() + (r * cols + c) * elem_bytes(type), &v, elem_bytes(type));
  }
  float at(int64_t r, int64_t c) const { return decode(type, get(r, c)); }
};

// Values: small integers in [-lim, lim] (exact products and sums) or uniform in [-range, range]
// rounded to the type. With `sparse`, every group of 4 keeps 0, 1 or 2 random positions
// (mostly 2, so the metadata codes all occur, including the fill-in ones).
inline RawMatrix random_matrix(SparseType type, int64_t rows, int64_t cols, bool ints, float range, bool sparse,
                               uint64_t seed) {
  RawMatrix m{type, rows, cols, std::vector<uint8_t>(static_cast<size_t>(rows * cols * elem_bytes(type)))};
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uni(-range, range);
  std::uniform_int_distribution<int> small(-static_cast<int>(range), static_cast<int>(range));
  auto value = [&] { return ints ? static_cast<float>(small(rng)) : uni(rng); };
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < cols / 4; ++g) {
      bool keep[4] = {true, true, true, true};
      if (sparse) {
        const int count = static_cast<int>(rng() % 8) == 0 ? static_cast<int>(rng() % 2) : 2;
        keep[0] = keep[1] = keep[2] = keep[3] = false;
        for (int kept = 0; kept < count;) {
          const int i = static_cast<int>(rng() % 4);
          if (!keep[i]) keep[i] = true, ++kept;
        }
      }
      for (int i = 0; i < 4; ++i) m.set(r, 4 * g + i, keep[i] ? encode(type, value()) : 0u);
    }
  return m;
}

// Rebuilds dense [m, k] floats from prepacked values + metadata, reading every word a thread
// that supplies metadata holds (and checking that copies agree and codes are legal): returns
// false with `why` on a malformed buffer.
inline bool decode_prepacked(SparseType type, int64_t m, int64_t k, const std::vector<uint8_t>& values,
                             const std::vector<uint8_t>& meta, std::vector<float>* dense, std::string* why) {
  using namespace lowbit::formats;
  const Sparse24Type ft = format_of(type);
  const int eb = elem_bytes(type);
  dense->assign(static_cast<size_t>(m * k), 0.0f);
  const int64_t slabs = sparse24_slabs(m), kbs = sparse24_k_blocks(k, ft);
  for (int64_t kb = 0; kb < kbs; ++kb)
    for (int64_t slab = 0; slab < slabs; ++slab)
      for (int t = 0; t < 128; ++t)
        for (int j = 0; j < 2; ++j) {
          uint32_t word;
          std::memcpy(&word, meta.data() + (kb * slabs + slab) * kSparseMetaBlockBytes + 8 * t + 4 * j, 4);
          for (int i = 0; i < 8; ++i) {
            const SparseChunkPos pos = sparse24_chunk_pos(ft, t, j, i);
            const int64_t row = slab * kSparseSlabRows + pos.row, col = kb * sparse24_block_k(ft) + pos.col;
            const uint32_t code = (word >> (4 * i)) & 0xF;
            const int a = code & 3, b = code >> 2;
            if (a >= b) {
              *why = "illegal metadata code " + std::to_string(code) + " at row " + std::to_string(row) + " col " +
                     std::to_string(col);
              return false;
            }
            if (row >= m || col >= k) {
              if (code != 0x4) {
                *why = "padding code is not 0x4";
                return false;
              }
              continue;
            }
            uint32_t lo = 0, hi = 0;
            std::memcpy(&lo, values.data() + (row * (k / 2) + col / 2) * eb, eb);
            std::memcpy(&hi, values.data() + (row * (k / 2) + col / 2 + 1) * eb, eb);
            const float vl = decode(type, lo), vh = decode(type, hi);
            float* d = dense->data() + row * k + col;
            // Copies (F16's second thread pair) must agree with what the first wrote (a NaN
            // agrees with a NaN).
            auto differs = [](float have, float v) {
              return have != 0.0f && !(std::isnan(have) && std::isnan(v)) && have != v;
            };
            if (differs(d[a], vl) || differs(d[b], vh)) {
              *why = "metadata copies disagree at row " + std::to_string(row) + " col " + std::to_string(col);
              return false;
            }
            d[a] = vl;
            d[b] = vh;
          }
        }
  return true;
}

}  // namespace lowbit_test
