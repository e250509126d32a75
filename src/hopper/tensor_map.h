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

Status make_tensor_map_2d(const TensorMap2dSpec& spec, CUtensorMap* out);

}  // namespace lowbit::hopper
