// Stage 3, quantize + gather (the seed's QSG): one block per token. The token's k slots are
// claimed first (one atomic per routing pair on its expert's counter), then each 128-wide K
// block is quantized once -- scale = max(amax, 1e-12) / 448, q = e4m3(x / scale), the host
// quantizer's rule (formats/quantize.h) -- and written to all of the token's sorted rows.
// In atomic mode the token's FP32 output (or FP32 sums) row is zeroed here, ahead of the GEMM's
// atomics in stream order.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "formats/quantize_device.cuh"
#include "moe/workspace.h"

namespace lowbit::moe {

constexpr int kGatherThreads = 256;  // x 8 elements = 2048 of K per pass

__global__ void __launch_bounds__(kGatherThreads)
    quantize_gather_kernel(const __nv_bfloat16* __restrict__ x, MoeParams p) {
  __shared__ int s_row[kMaxTopK];
  const int t = blockIdx.x, tid = threadIdx.x;
  if (tid < p.top_k) {
    const int pair = t * p.top_k + tid;
    const int e = p.ids[pair];
    int row = -1;
    if (static_cast<unsigned>(e) < static_cast<unsigned>(p.experts)) {
      const int slot = atomicAdd(&p.cursor[e], 1);
      if (slot < p.counts[e]) {
        row = p.offsets[e] + slot;
        p.row_pair[row] = pair;
        p.row_weight[row] = p.weights[pair];
      } else if (atomicCAS(&p.status[0], kMoeOk, kMoeStaleLayout) == kMoeOk) {
        p.status[1] = pair;
      }
    }
    s_row[tid] = row;
  }
  if (!p.deterministic) {
    float* z = p.y_fp32 ? static_cast<float*>(p.y) : p.sums;
    for (int n = tid * 4; n < p.n; n += kGatherThreads * 4)
      *reinterpret_cast<float4*>(z + static_cast<int64_t>(t) * p.n + n) = make_float4(0.f, 0.f, 0.f, 0.f);
  }
  __syncthreads();

  const __nv_bfloat16* xrow = x + static_cast<int64_t>(t) * p.k;
  // Warp-uniform trip count (the scale reduction shuffles across the warp); K is a multiple of
  // 128, so each half warp is wholly inside or wholly past the row.
  for (int base = (tid / 32) * 256; base < p.k; base += kGatherThreads * 8) {
    const int kk = base + (tid % 32) * 8;
    const bool inside = kk < p.k;
    const uint4 raw = inside ? *reinterpret_cast<const uint4*>(xrow + kk) : make_uint4(0, 0, 0, 0);
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
    float f[8];
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 v = __bfloat1622float2(h[i]);
      f[2 * i] = v.x;
      f[2 * i + 1] = v.y;
      amax = fmaxf(amax, fmaxf(fabsf(v.x), fabsf(v.y)));
    }
    // The 16 threads of a 128-wide block are a half warp.
    const float scale = formats::block_scale_1x128(amax);
    const uint2 q = formats::quantize8_e4m3(f, scale);
    for (int j = 0; j < p.top_k && inside; ++j) {
      const int row = s_row[j];
      if (row < 0) continue;
      *reinterpret_cast<uint2*>(p.xq + static_cast<int64_t>(row) * p.k + kk) = q;
      if (tid % 16 == 0) p.x_scales[static_cast<int64_t>(kk / 128) * p.rows + row] = scale;
    }
  }
}

}  // namespace lowbit::moe
