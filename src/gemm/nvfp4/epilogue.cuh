// NVFP4 GEMM epilogue: the consumers hold D^T (weight rows x tokens); they scale it, round to
// BF16 and write it transposed into shared memory ([token][row]), then all 256 consumer threads
// store the tile's token rows to D[M, N] with 16-byte coalesced stores. Where the unit's D is
// (dense or a group's) comes from the unit view.
#pragma once

#include <cuda_bf16.h>

#include "gemm/nvfp4/mainloop.cuh"
#include "gemm/nvfp4/traits.cuh"
#include "hopper/named_barrier.cuh"
#include "hopper/stmatrix.cuh"

namespace lowbit::nvfp4 {

// Where 16-byte unit u (8 weight rows) of token row t of the staged tile sits: unit u ^ (t % 8),
// so the 8 token rows a transposed stmatrix writes fall in distinct banks.
__device__ __forceinline__ int epi_unit(int token, int unit) { return unit ^ (token % 8); }

// Accumulator fragment of m64nN (warp w, lane l): acc[4j + 2h + e] is weight row 16w + l/4 + 8h,
// token 8j + 2(l%4) + e. The pair e = 0, 1 of (j, h) is one row of an 8x8 mma-layout matrix
// (8 weight rows x 8 tokens), so a transposed stmatrix writes it as 8 token rows of 8 weight rows
// (16 bytes each): four matrices per instruction. (As 2-byte scalar stores, with 4-way bank
// conflicts, it cost ~1 us per tile.)
template <class T>
__device__ __forceinline__ void nvfp4_store_tile(typename T::SharedStorage& ss, const Nvfp4UnitView& v,
                                                 int consumer_wg, const float (&acc)[T::kTokens / 2]) {
  static_assert(T::kTokens % 16 == 0, "two 8-token matrix columns per stmatrix");
  const Nvfp4Unit& w = v.w;
  const int t = threadIdx.x % 128;
  const int lane = t % 32;
  // The previous unit's copy-out (persistent CTA) reads the staging tile until every consumer
  // thread has passed here; and where the tile is staged in the ring (256 tokens), the other
  // warpgroup's last MMAs read that stage until it has passed here.
  hopper::named_barrier_sync(hopper::NamedBarrier::kConsumers, 256);
  __nv_bfloat16* tile = reinterpret_cast<__nv_bfloat16*>(T::epi_tile(ss));
  // Lane l addresses row l % 8 of matrix l / 8 = (token block 2i + (l / 8) / 2, weight-row half (l / 8) % 2).
  const int mi = lane / 8;
  const int row = consumer_wg * 64 + 16 * (t / 32) + 8 * (mi % 2);
#pragma unroll
  for (int i = 0; i < T::kTokens / 16; ++i) {
    const int token = 8 * (2 * i + mi / 2) + lane % 8;
    uint32_t r[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {  // matrix q: token block 2i + q / 2, half q % 2
      const int a = 4 * (2 * i + q / 2) + 2 * (q % 2);
      const __nv_bfloat162 pair = __floats2bfloat162_rn(acc[a] * v.alpha, acc[a + 1] * v.alpha);
      r[q] = *reinterpret_cast<const uint32_t*>(&pair);
    }
    hopper::stmatrix_x4_trans(tile + token * kTileRows + 8 * epi_unit(token, row / 8), r[0], r[1], r[2], r[3]);
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
      *reinterpret_cast<uint4*>(v.d + gm * v.n + gn) =
          *reinterpret_cast<const uint4*>(tile + token * kTileRows + 8 * epi_unit(token, col / 8));
  }
}

}  // namespace lowbit::nvfp4
