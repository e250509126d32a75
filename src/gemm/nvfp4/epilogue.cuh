// NVFP4 GEMM epilogue: the consumers hold D^T (weight rows x tokens); they scale it, round to
// BF16 and write it transposed into shared memory ([token][row]), then all 256 consumer threads
// store the tile's token rows to D[M, N] with 16-byte coalesced stores. Where the unit's D is
// (dense or a group's) comes from the unit view.
#pragma once

#include <cuda_bf16.h>

#include "gemm/nvfp4/mainloop.cuh"
#include "gemm/nvfp4/traits.cuh"
#include "hopper/named_barrier.cuh"

namespace lowbit::nvfp4 {

// Accumulator fragment of m64nN (warp w, lane l): acc[4j + 2h + e] is weight row 16w + l/4 + 8h,
// token 8j + 2(l%4) + e.
template <class T>
__device__ __forceinline__ void nvfp4_store_tile(typename T::SharedStorage& ss, const Nvfp4UnitView& v,
                                                 int consumer_wg, const float (&acc)[T::kTokens / 2]) {
  const Nvfp4Unit& w = v.w;
  const int t = threadIdx.x % 128;
  // The previous unit's copy-out (persistent CTA) reads the staging tile until every consumer
  // thread has passed here.
  hopper::named_barrier_sync(hopper::NamedBarrier::kConsumers, 256);
  const int row = consumer_wg * 64 + 16 * (t / 32) + (t % 32) / 4;
  __nv_bfloat16* tile = reinterpret_cast<__nv_bfloat16*>(ss.epi);
#pragma unroll
  for (int j = 0; j < T::kTokens / 8; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int token = 8 * j + 2 * (t % 4) + e;
        tile[token * kTileRows + row + 8 * h] = __float2bfloat16_rn(acc[4 * j + 2 * h + e] * v.alpha);
      }
  hopper::named_barrier_sync(hopper::NamedBarrier::kConsumers, 256);

  // 16 chunks of 8 BF16 per token row; n is a multiple of 16, so a chunk is wholly in or out.
  const int ct = static_cast<int>(threadIdx.x) - 128;
  for (int c = ct; c < T::kTokens * (kTileRows / 8); c += 256) {
    const int token = c / (kTileRows / 8);
    const int col = (c % (kTileRows / 8)) * 8;
    const int64_t gm = static_cast<int64_t>(w.m_tile) * T::kTokens + token;
    const int gn = w.n_tile * kTileRows + col;
    if (gm < v.m && gn < v.n)
      *reinterpret_cast<uint4*>(v.d + gm * v.n + gn) = *reinterpret_cast<const uint4*>(tile + token * kTileRows + col);
  }
}

}  // namespace lowbit::nvfp4
