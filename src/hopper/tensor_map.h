// TMA tensor maps, host side. cuTensorMapEncodeTiled is reached through the runtime's
// driver entry point, so lowbit does not link libcuda at build time.
#pragma once

#include <cuda.h>
#include <cstdint>

#include "lowbit/status.h"

namespace lowbit::hopper {

enum class TmaSwizzle { kNone, k32B, k64B, k128B };

// A row-major 2-D tensor [rows, cols] of `elem_bytes`-sized elements with a row pitch of
// `row_stride_bytes`, read or written in boxes of [box_rows, box_cols].
struct TensorMap2dSpec {
  const void* base = nullptr;
  CUtensorMapDataType dtype = CU_TENSOR_MAP_DATA_TYPE_UINT8;
  int elem_bytes = 1;
  uint64_t rows = 0;
  uint64_t cols = 0;
  uint64_t row_stride_bytes = 0;
  uint32_t box_rows = 0;
  uint32_t box_cols = 0;
  TmaSwizzle swizzle = TmaSwizzle::k128B;
  // L2 promotion: 256B for streamed operands.
  CUtensorMapL2promotion l2_promotion = CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
};

// A densely packed [rows, cols] tensor (row pitch cols * elem_bytes) in boxes of
// [box_rows, box_cols]; swizzle and L2 promotion keep their defaults until set.
inline TensorMap2dSpec dense_2d(const void* base, CUtensorMapDataType dtype, int elem_bytes, int64_t rows,
                                int64_t cols, uint32_t box_rows, uint32_t box_cols) {
  TensorMap2dSpec s;
  s.base = base;
  s.dtype = dtype;
  s.elem_bytes = elem_bytes;
  s.rows = static_cast<uint64_t>(rows);
  s.cols = static_cast<uint64_t>(cols);
  s.row_stride_bytes = static_cast<uint64_t>(cols) * static_cast<uint64_t>(elem_bytes);
  s.box_rows = box_rows;
  s.box_cols = box_cols;
  return s;
}

// The tensor map of `spec`. Each host thread keeps the maps it encoded, keyed by every field of
// the spec (kMapCacheSlots of them, direct-mapped: a colliding spec replaces the older map), so
// a call on the same tensors as an earlier one copies 128 bytes instead of asking the driver
// again. A map holds only the spec's values, so a stale entry (a freed buffer) is never wrong
// for a spec that hashes to it: a hit means the same address, shape and layout. Failures are
// not cached.
inline constexpr int kMapCacheSlots = 1024;
Status make_tensor_map_2d(const TensorMap2dSpec& spec, CUtensorMap* out);

// cuTensorMapEncodeTiled itself, bypassing the cache (and measured by lowbit-bench --host-overhead).
Status encode_tensor_map_2d(const TensorMap2dSpec& spec, CUtensorMap* out);

}  // namespace lowbit::hopper
