// Layout of the fused MoE workspace, shared by the host launcher and the device kernels, and the
// parameters every MoE kernel receives.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gemm/core/tail_plan.h"
#include "lowbit/moe.h"

namespace lowbit::moe {

// Why a routing pair was left out (status[0]); status[1] is the first such pair (t * top_k + j).
enum MoeError : int {
  kMoeOk = 0,
  kMoeBadExpertId = 1,     // a caller-given expert id outside [0, experts)
  kMoeStaleLayout = 2,     // the gather stage ran twice on one layout (its slot counters overflowed)
};

inline const char* moe_error_text(int code) {
  switch (code) {
    case kMoeOk: return "ok";
    case kMoeBadExpertId: return "expert id out of range [0, experts)";
    case kMoeStaleLayout: return "quantize+gather ran again without a new layout stage";
  }
  return "unknown";
}

constexpr int kMaxExperts = 512;  // 16 logits per routing lane in registers (32 spilled); one expert per layout thread
constexpr int kMaxTopK = 32;       // one pick per lane of the routing warp

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Capacity of the expert-sorted buffers: every pair once, each expert's segment padded to a
// multiple of 4 rows (the per-row scales of a tile are then 16-byte aligned for the bulk copy).
inline int64_t sorted_rows(const MoeShape& s) {
  return round_up(static_cast<int64_t>(s.m) * s.top_k + 3LL * s.experts, 4);
}

struct Layout {
  size_t status, ids, weights, counts, offsets, cursor, tile_start, row_pair, row_weight, x_scales, xq, sums, total;
  int64_t rows;
  int64_t sum_floats;  // FP32 sums: [m * top_k, n] deterministic, [m, n] atomic with BF16 output, else 0
};

inline Layout workspace_layout(const MoeShape& s, MoeReduce reduce, OutType y_type) {
  Layout l{};
  size_t off = 0;
  auto take = [&off](size_t bytes) {
    const size_t at = off;
    off = static_cast<size_t>(round_up(static_cast<int64_t>(off + bytes), 256));
    return at;
  };
  const int64_t pairs = static_cast<int64_t>(s.m) * s.top_k;
  l.rows = sorted_rows(s);
  l.status = take(16);
  l.ids = take(4 * pairs);
  l.weights = take(4 * pairs);
  l.counts = take(4 * s.experts);
  l.offsets = take(4 * (s.experts + 1));
  l.cursor = take(4 * s.experts);
  // tile_start[0..experts], then the layout stage's plan for the token-rows GEMM's last partial wave
  // (gemm::TailPlan: whole, parts, units).
  l.tile_start = take(4 * (s.experts + 1 + gemm::kTailPlanInts));
  l.row_pair = take(4 * l.rows);
  l.row_weight = take(4 * l.rows);
  l.x_scales = take(4 * l.rows * (s.k / 128));
  l.xq = take(static_cast<size_t>(l.rows) * s.k);
  l.sum_floats = reduce == MoeReduce::kDeterministic ? pairs * s.n
                 : y_type == OutType::kBF16         ? static_cast<int64_t>(s.m) * s.n
                                                    : 0;
  l.sums = take(4 * l.sum_floats);
  l.total = off;
  return l;
}

// What every MoE kernel reads: sizes and the workspace's pointers.
struct MoeParams {
  int m, n, k, experts, top_k;
  int kblocks, nblocks;  // k / 128, ceil(n / 128)
  int unit_nblocks;      // the GEMM's column tiles per token tile: nblocks, or ceil(n / block_n) on the core
  int token_tile, splits;
  // The token-rows GEMM's CTAs, where its last partial wave's tiles may be cut along K (atomic
  // mode: the parts add into the sums like whole tiles); 0: never.
  int tail_grid;
  int tail_min_part;  // the fewest K blocks a cut part may have (MoeConfig::tail_split)
  int64_t rows;
  bool deterministic;
  bool y_fp32;
  int* status;
  const int32_t* ids;  // the routing in use (the caller's or the route stage's)
  const float* weights;
  int32_t* counts;
  int32_t* offsets;
  int32_t* cursor;
  int32_t* tile_start;
  int32_t* row_pair;
  float* row_weight;
  float* x_scales;
  uint8_t* xq;
  float* sums;  // see Layout::sum_floats; null when unused
  void* y;
  const uint8_t* w;       // [experts * n, k]
  const float* w_scales;  // [experts, nblocks, kblocks]
  bool tile_prefetch;
};

}  // namespace lowbit::moe
