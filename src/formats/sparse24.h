// 2:4 structured sparsity, host reference (issue 4 groundwork): along each row, every group of 4
// consecutive elements holds at most 2 nonzeros. The compressed form keeps 2 values per group
// and their positions (two distinct indices 0..3, increasing). The layout the sparse wgmma
// consumes (metadata bit order, thread ownership) is a later step built on this plain form.
#pragma once

#include <cstdint>
#include <vector>

namespace lowbit::formats {

struct Sparse24Violation {
  bool ok = true;
  int64_t row = -1;
  int64_t group = -1;  // group index along the row: elements [4 * group, 4 * group + 4)
  int nonzeros = 0;
};

// The first group (row-major order) with more than 2 nonzeros, if any. A trailing group of a row
// whose length is not a multiple of 4 counts as padded with zeros.
Sparse24Violation check_2_4(const float* x, int64_t rows, int64_t cols);

// Keeps the 2 largest magnitudes of every group (ties go to the lower index; every NaN ranks
// alike, above infinity, as in the packed pruners), zeroes the rest; a trailing short group likewise.
void prune_2_4(float* x, int64_t rows, int64_t cols);

struct Compressed24 {
  bool ok = false;                // false: cols % 4 != 0 or a group with more than 2 nonzeros (nothing compressed)
  int64_t rows = 0, cols = 0;     // dense shape
  std::vector<float> values;      // [rows, cols / 2]: the 2 kept values of each group, in index order
  std::vector<uint8_t> indices;   // [rows, cols / 4]: bits 0-1 first kept index, bits 2-3 second
};

// Compresses a 2:4 matrix with cols % 4 == 0; anything else gives ok = false and no values. A
// group with fewer than 2 nonzeros keeps its nonzero (if any) and the lowest free index, so the
// two indices are always distinct and increasing.
Compressed24 compress_2_4(const float* x, int64_t rows, int64_t cols);

std::vector<float> decompress_2_4(const Compressed24& c);

}  // namespace lowbit::formats
