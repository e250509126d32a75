// NVFP4 GEMM epilogue: the consumers hold D^T (weight rows x tokens); each warp scales its 16
// rows, rounds them to BF16, transposes them through a small shared-memory buffer and stores
// them to D[M, N] as 32-byte token segments. Where the unit's D is (dense or a group's) comes
// from the unit view.
#pragma once

#include <cuda_bf16.h>

#include "gemm/nvfp4/mainloop.cuh"
#include "gemm/nvfp4/traits.cuh"
#include "hopper/stmatrix.cuh"

namespace lowbit::nvfp4 {

// Accumulator fragment of m64nN (warp w, lane l): acc[4j + 2h + e] is weight row 16w + l/4 + 8h,
// token 8j + 2(l%4) + e. The pair e = 0, 1 of (j, h) is one row of an 8x8 mma-layout matrix
// (8 weight rows x 8 tokens), so a transposed stmatrix writes it as 8 token rows of 8 weight rows
// (16 bytes each): four matrices, 16 tokens of the warp's 16 rows, per instruction.
//
// Each warp stages and stores its own rows, 16 tokens at a time, through 512 bytes of shared
// memory: no barrier between warps, and no tile-sized staging area, so the ring keeps that room
// (a fifth stage at 128 tokens; at 256 the tile would have left two). A token's 16 rows are 32
// contiguous bytes of D, one sector. (The first versions staged the whole D^T tile and stored
// 256-byte token rows: 32 KiB at 128 tokens, 64 KiB at 256.)
constexpr int kEpiWarpBytes = 512;  // 16 tokens x 16 weight rows, BF16

// Where 16-byte half h (8 weight rows) of token row t of a warp's chunk sits: the halves trade
// places in tokens 4-7 and 12-15, so the 8 token rows one stmatrix matrix writes (32 bytes apart)
// fall in distinct banks.
__device__ __forceinline__ int epi_offset(int token, int half) { return 32 * token + 16 * (half ^ ((token / 4) % 2)); }

template <class T>
__device__ __forceinline__ void nvfp4_store_tile(typename T::SharedStorage& ss, const Nvfp4UnitView& v,
                                                 int consumer_wg, const float (&acc)[T::kTokens / 2]) {
  static_assert(T::kTokens % 16 == 0, "two 8-token matrix columns per stmatrix");
  const Nvfp4Unit& w = v.w;
  const int t = threadIdx.x % 128;
  const int lane = t % 32;
  uint8_t* buf = ss.epi + (consumer_wg * 4 + t / 32) * kEpiWarpBytes;
  // stmatrix: lane l addresses row l % 8 of matrix l / 8 = (token block l / 16, weight-row half (l / 8) % 2).
  const int mi = lane / 8;
  uint8_t* st = buf + epi_offset(8 * (mi / 2) + lane % 8, mi % 2);
  // Copy-out: lane l moves half l % 2 of token l / 2.
  const uint8_t* ld = buf + epi_offset(lane / 2, lane % 2);
  const int gn = w.n_tile * kTileRows + consumer_wg * 64 + 16 * (t / 32) + 8 * (lane % 2);
  const int64_t gm0 = static_cast<int64_t>(w.m_tile) * T::kTokens + lane / 2;
  // n is a multiple of 16, so a warp's 16 rows are wholly in or out.
  const bool row_in = gn < v.n;
#pragma unroll
  for (int i = 0; i < T::kTokens / 16; ++i) {
    uint32_t r[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {  // matrix q: token block 2i + q / 2, half q % 2
      const int a = 4 * (2 * i + q / 2) + 2 * (q % 2);
      const __nv_bfloat162 pair = __floats2bfloat162_rn(acc[a] * v.alpha, acc[a + 1] * v.alpha);
      r[q] = *reinterpret_cast<const uint32_t*>(&pair);
    }
    hopper::stmatrix_x4_trans(st, r[0], r[1], r[2], r[3]);
    __syncwarp();
    const uint4 out = *reinterpret_cast<const uint4*>(ld);
    __syncwarp();  // the next chunk's stmatrix overwrites what the lanes just read
    const int64_t gm = gm0 + 16 * i;
    if (row_in && gm < v.m) *reinterpret_cast<uint4*>(v.d + gm * v.n + gn) = out;
  }
}

}  // namespace lowbit::nvfp4
