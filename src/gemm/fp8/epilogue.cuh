// FP8 GEMM epilogue: D = alpha * acc (+ bias[col]), converted to BF16 or FP32 and stored with
// TMA. Each consumer warpgroup stages its 64-row slice in 64 x 128-byte chunks (128B-swizzled,
// so the fragment writes are bank-conflict free), and one thread stores each chunk with TMA;
// the store runs asynchronously while the warpgroup moves on to the next unit's mainloop.
// A new fused operation (positional embedding, residual, activation) belongs in this file.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>

#include "gemm/fp8/traits.cuh"
#include "gemm/tile_scheduler.cuh"
#include "hopper/named_barrier.cuh"
#include "hopper/stmatrix.cuh"
#include "hopper/tma.cuh"

namespace lowbit::fp8 {

// Accumulator fragment of m64nN (per warp w, lane l): acc[4*g + 2*h + e] is row 16w + l/4 + 8h,
// column 8g + 2(l%4) + e.
template <class T>
struct Fp8Epilogue {
  int chunk_counter = 0;  // alternates staging slots across every chunk this warpgroup stores

  __device__ __forceinline__ static hopper::NamedBarrier barrier(int consumer_wg) {
    return consumer_wg == 0 ? hopper::NamedBarrier::kEpilogueWg0 : hopper::NamedBarrier::kEpilogueWg1;
  }

  __device__ __forceinline__ void store(typename T::SharedStorage& ss, int consumer_wg,
                                        const CUtensorMap* tm_d, const Fp8KernelParams& p,
                                        const gemm::WorkUnit& w, float alpha,
                                        float (&acc)[T::kBlockN / 2]) {
    const int t = threadIdx.x % 128;
    const int warp = t / 32;
    const int lane = t % 32;
    const int row0 = w.m_block * T::kBlockM + consumer_wg * 64;
    const int col0 = w.n_block * T::kBlockN;
    if (row0 >= p.m) return;  // whole warpgroup slice below the matrix (small M)

#pragma unroll
    for (int g = 0; g < T::kBlockN / 8; ++g) {
      const int col = col0 + 8 * g + 2 * (lane % 4);
      float b0 = 0.0f, b1 = 0.0f;
      if (p.bias != nullptr && col < p.n) {  // n is a multiple of 16, so col + 1 < n as well
        b0 = __bfloat162float(p.bias[col]);
        b1 = __bfloat162float(p.bias[col + 1]);
      }
      acc[4 * g + 0] = fmaf(acc[4 * g + 0], alpha, b0);
      acc[4 * g + 1] = fmaf(acc[4 * g + 1], alpha, b1);
      acc[4 * g + 2] = fmaf(acc[4 * g + 2], alpha, b0);
      acc[4 * g + 3] = fmaf(acc[4 * g + 3], alpha, b1);
    }

#pragma unroll
    for (int c = 0; c < T::kEpiChunks; ++c) {
      const int chunk_col = col0 + c * T::kEpiChunkCols;
      if (chunk_col >= p.n) break;  // uniform over the warpgroup
      uint8_t* buf = ss.epi[consumer_wg][chunk_counter & 1];
      // The store issued two chunks ago read this slot; wait until it has.
      if (t == 0) hopper::tma_store_wait_read<1>();
      hopper::named_barrier_sync(barrier(consumer_wg), 128);

      if constexpr (!T::kOutFp32) {
#pragma unroll
        for (int j = 0; j < T::kEpiChunkCols / 16; ++j) {
          const int g = (c * T::kEpiChunkCols) / 8 + 2 * j;
          const uint32_t r0 = pack_bf16(acc[4 * g + 0], acc[4 * g + 1]);
          const uint32_t r1 = pack_bf16(acc[4 * g + 2], acc[4 * g + 3]);
          const uint32_t r2 = pack_bf16(acc[4 * g + 4], acc[4 * g + 5]);
          const uint32_t r3 = pack_bf16(acc[4 * g + 6], acc[4 * g + 7]);
          const int mi = lane / 8;
          const int row = warp * 16 + (mi % 2) * 8 + lane % 8;
          const int unit = 2 * j + mi / 2;
          hopper::stmatrix_x4(buf + row * 128 + ((unit ^ (row % 8)) * 16), r0, r1, r2, r3);
        }
      } else {
#pragma unroll
        for (int gl = 0; gl < T::kEpiChunkCols / 8; ++gl) {
          const int g = (c * T::kEpiChunkCols) / 8 + gl;
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int row = warp * 16 + lane / 4 + 8 * h;
            const int colc = 8 * gl + 2 * (lane % 4);
            const int unit = colc / 4;
            float2* dst = reinterpret_cast<float2*>(buf + row * 128 + ((unit ^ (row % 8)) * 16) + (colc % 4) * 4);
            *dst = make_float2(acc[4 * g + 2 * h], acc[4 * g + 2 * h + 1]);
          }
        }
      }
      hopper::fence_async_shared();
      hopper::named_barrier_sync(barrier(consumer_wg), 128);
      if (t == 0) {
        hopper::tma_store_2d(tm_d, buf, chunk_col, row0);
        hopper::tma_store_commit();
      }
      ++chunk_counter;
    }
  }

  // Shared memory must outlive the stores that read it.
  __device__ __forceinline__ void drain() {
    if (threadIdx.x % 128 == 0) hopper::tma_store_wait_all<0>();
  }

 private:
  __device__ __forceinline__ static uint32_t pack_bf16(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
};

}  // namespace lowbit::fp8
