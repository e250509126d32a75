// The A operand's TMA box rows: arithmetic the launchers and the kernel parameters
// (KernelParams::set_a_tail) share, with no host dependencies, so kernel headers can include it.
#pragma once

#include <cstdint>

namespace lowbit::gemm {

// Rows of the A operand's TMA box: the tile's rows, or M where M is smaller (one tile row; the
// consumer warpgroups whose 64 rows start past M idle, KernelParams::a_box_rows). A box that
// reaches past the tensor's last row streams far slower than an in-bounds one (with 128-row boxes
// M = 64 ran 25% slower than M = 128 at the same N and K; with 64-row boxes M <= 32 ran 1.1-1.3x
// slower than with boxes of M rows, docs/perf.md block-scaled v15), so the box stops at M. The A
// slot's rows past the box keep stale bytes: their MMA rows are outputs past M, which no store writes.
inline int a_box_rows(int64_t m, int block_m) { return m < block_m ? static_cast<int>(m) : block_m; }

// The last tile row's A rows where M spans more than one tile row and is not a multiple of it: its
// A box stops at M too (through a second map, KernelParams::a_tail_rows). A box reaching past
// the tensor's last row streams its out-of-bounds rows far slower than it loads real ones: 128-row
// tiles ran 128 x 4096 x 4096 in 9.3 us, 129 x 4096 x 4096 in 17.2 and 256 x 4096 x 4096 in 10.4
// (docs/perf.md W1 v25). {0, -1}: none.
struct ATail {
  int rows = 0;
  int block = -1;
};
inline ATail a_tail(int64_t m, int block_m) {
  if (m <= block_m || m % block_m == 0) return {};
  return {static_cast<int>(m % block_m), static_cast<int>(m / block_m)};
}

}  // namespace lowbit::gemm
