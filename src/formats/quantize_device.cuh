// Device side of the per-row 1x128 E4M3 quantization (formats/quantize.h has the host side and
// the rule): a 128-wide block is quantized by 16 consecutive lanes of a warp, 8 values each.
#pragma once

#include <cuda_fp8.h>

#include <cstdint>

#include "formats/e4m3.h"
#include "formats/quantize.h"

namespace lowbit::formats {

struct BlockScale {
  float scale;  // stored with the codes: x ~ e4m3 * scale
  float inv;    // what the values are multiplied by before rounding
};

// The block's scale from each lane's amax over its 8 values: the 16 lanes of a half warp
// reduce together (every lane of the warp must call it).
__device__ __forceinline__ BlockScale block_scale_1x128(float lane_amax) {
#pragma unroll
  for (int o = 8; o > 0; o /= 2) lane_amax = fmaxf(lane_amax, __shfl_xor_sync(0xffffffffu, lane_amax, o));
  const float a = fmaxf(lane_amax, kBlockScaleFloor);
  return BlockScale{a / kE4M3Max, kE4M3Max / a};
}

// Eight values -> eight E4M3 codes (round to nearest even, saturating), as the host's
// float_to_e4m3(x * inv).
__device__ __forceinline__ uint2 quantize8_e4m3(const float (&f)[8], float inv) {
  uint2 q;
  uint16_t* q16 = reinterpret_cast<uint16_t*>(&q);
#pragma unroll
  for (int i = 0; i < 4; ++i)
    q16[i] = __nv_cvt_float2_to_fp8x2(make_float2(f[2 * i] * inv, f[2 * i + 1] * inv), __NV_SATFINITE, __NV_E4M3);
  return q;
}

}  // namespace lowbit::formats
