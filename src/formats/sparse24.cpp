#include "formats/sparse24.h"

#include <cfloat>
#include <cmath>

namespace lowbit::formats {

// Elements of group g of a row of `cols` (a trailing group may be short: cols % 4 != 0).
static int group_len(int64_t g, int64_t cols) { return static_cast<int>(cols - 4 * g < 4 ? cols - 4 * g : 4); }

Sparse24Violation check_2_4(const float* x, int64_t rows, int64_t cols) {
  Sparse24Violation v;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < (cols + 3) / 4; ++g) {
      int nz = 0;
      for (int i = 0; i < group_len(g, cols); ++i) nz += x[r * cols + 4 * g + i] != 0.0f;
      if (nz > 2) {
        v.ok = false;
        v.row = r;
        v.group = g;
        v.nonzeros = nz;
        return v;
      }
    }
  return v;
}

// Magnitude for ranking: every NaN ranks alike and above infinity, as in the packed pruners
// (sparse24_magnitude), so they keep the same elements. Double, so infinity still ranks above
// every finite float and below NaN.
static double rank_of(float v) {
  if (std::isnan(v)) return HUGE_VAL;
  return std::isinf(v) ? DBL_MAX : std::fabs(static_cast<double>(v));
}

void prune_2_4(float* x, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < (cols + 3) / 4; ++g) {
      float* p = x + r * cols + 4 * g;
      const int len = group_len(g, cols);
      if (len <= 2) continue;
      // Rank by magnitude, lower index first on ties; keep the top two.
      int first = 0;
      for (int i = 1; i < len; ++i)
        if (rank_of(p[i]) > rank_of(p[first])) first = i;
      int second = first == 0 ? 1 : 0;
      for (int i = 0; i < len; ++i)
        if (i != first && rank_of(p[i]) > rank_of(p[second])) second = i;
      for (int i = 0; i < len; ++i)
        if (i != first && i != second) p[i] = 0.0f;
    }
}

Compressed24 compress_2_4(const float* x, int64_t rows, int64_t cols) {
  Compressed24 c;
  c.rows = rows;
  c.cols = cols;
  c.ok = cols % 4 == 0 && check_2_4(x, rows, cols).ok;
  if (!c.ok) return c;
  c.values.assign(static_cast<size_t>(rows * cols / 2), 0.0f);
  c.indices.assign(static_cast<size_t>(rows * cols / 4), 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < cols / 4; ++g) {
      const float* p = x + r * cols + 4 * g;
      int idx[2];
      int n = 0;
      for (int i = 0; i < 4 && n < 2; ++i)
        if (p[i] != 0.0f) idx[n++] = i;
      // Fill up with the lowest free positions, then keep the pair increasing.
      for (int i = 0; i < 4 && n < 2; ++i)
        if (n == 0 || idx[0] != i) idx[n++] = i;
      if (idx[0] > idx[1]) {
        const int t = idx[0];
        idx[0] = idx[1];
        idx[1] = t;
      }
      const size_t gi = static_cast<size_t>(r * (cols / 4) + g);
      c.values[2 * gi] = p[idx[0]];
      c.values[2 * gi + 1] = p[idx[1]];
      c.indices[gi] = static_cast<uint8_t>(idx[0] | (idx[1] << 2));
    }
  return c;
}

std::vector<float> decompress_2_4(const Compressed24& c) {
  if (!c.ok) return {};  // a refused compression holds no values
  std::vector<float> out(static_cast<size_t>(c.rows * c.cols), 0.0f);
  for (int64_t r = 0; r < c.rows; ++r)
    for (int64_t g = 0; g < c.cols / 4; ++g) {
      const size_t gi = static_cast<size_t>(r * (c.cols / 4) + g);
      const int i0 = c.indices[gi] & 3, i1 = (c.indices[gi] >> 2) & 3;
      out[static_cast<size_t>(r * c.cols + 4 * g + i0)] = c.values[2 * gi];
      out[static_cast<size_t>(r * c.cols + 4 * g + i1)] = c.values[2 * gi + 1];
    }
  return out;
}

}  // namespace lowbit::formats
