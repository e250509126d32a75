// NVFP4 activations -> BF16, exactly (every E2M1 x E4M3 product fits BF16): the first pass of an
// NVFP4 x NVFP4 GEMM, whose MMAs take BF16 activations from shared memory. Dense and grouped
// calls run the same per-block conversion.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "formats/nvfp4_device.cuh"

namespace lowbit::nvfp4 {

// Twice the E2M1 magnitudes {0, 0.5, 1, 1.5, 2, 3, 4, 6} as nibbles of one word: a register
// lookup, where an indexed array would live in local memory.
__device__ __forceinline__ float e2m1_value(uint32_t code) {
  const float v = 0.5f * static_cast<float>((0xC8643210u >> (4 * (code & 7))) & 0xFu);
  return (code & 8) ? -v : v;
}

// Block i of 16 values: 8 packed bytes and one E4M3 scale in, 32 bytes out (16-byte aligned).
__device__ __forceinline__ void act_block_to_bf16(const uint8_t* __restrict__ packed, const uint8_t* __restrict__ scales,
                                                  int64_t i, __nv_bfloat16* __restrict__ out) {
  const float s = formats::nvfp4_scale_to_float(scales[i]);
  const uint2 v = *reinterpret_cast<const uint2*>(packed + i * 8);
  const uint32_t w[2] = {v.x, v.y};
  uint32_t o[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const uint32_t byte = (w[j / 4] >> (8 * (j % 4))) & 0xFF;
    const __nv_bfloat162 pair = __floats2bfloat162_rn(e2m1_value(byte & 0xF) * s, e2m1_value(byte >> 4) * s);
    o[j] = *reinterpret_cast<const uint32_t*>(&pair);
  }
  uint4* dst = reinterpret_cast<uint4*>(out + i * 16);
  dst[0] = make_uint4(o[0], o[1], o[2], o[3]);
  dst[1] = make_uint4(o[4], o[5], o[6], o[7]);
}

}  // namespace lowbit::nvfp4
