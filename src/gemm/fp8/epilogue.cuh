// FP8 GEMM epilogue: applies the fused operations of gemm::EpilogueParams (alpha, bias, a
// row-broadcast add such as a positional embedding, an activation, a residual), converts to BF16
// or FP32 and stores with TMA. Each consumer warpgroup stages its 64-row slice in 64 x 128-byte
// chunks (128B-swizzled, so the fragment writes are bank-conflict free), and one thread stores
// each chunk with TMA; the store runs asynchronously while the warpgroup moves on to the next
// unit's mainloop. A new fused operation belongs here and in gemm/epilogue_params.h.
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

    if constexpr (T::kFused) {
      apply_fused_ops(p, row0 + warp * 16 + lane / 4, col0 + 2 * (lane % 4), alpha, acc);
    } else {
      apply_alpha_bias(p, col0 + 2 * (lane % 4), alpha, acc);
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

  // Plain variants: alpha and an optional bias, one uniform branch per column group.
  __device__ __forceinline__ static void apply_alpha_bias(const Fp8KernelParams& p, int c0, float alpha,
                                                          float (&acc)[T::kBlockN / 2]) {
#pragma unroll
    for (int g = 0; g < T::kBlockN / 8; ++g) {
      const int col = c0 + 8 * g;
      float b0 = 0.0f, b1 = 0.0f;
      if (p.epi.bias != nullptr && col < p.n) {  // n is a multiple of 16, so col + 1 < n as well
        b0 = __bfloat162float(p.epi.bias[col]);
        b1 = __bfloat162float(p.epi.bias[col + 1]);
      }
      acc[4 * g + 0] = fmaf(acc[4 * g + 0], alpha, b0);
      acc[4 * g + 1] = fmaf(acc[4 * g + 1], alpha, b1);
      acc[4 * g + 2] = fmaf(acc[4 * g + 2], alpha, b0);
      acc[4 * g + 3] = fmaf(acc[4 * g + 3], alpha, b1);
    }
  }

  // Fused variants. Element math on this thread's fragment: rows r0 and r0 + 8, columns c0 + 8g (+1).
  // Operands are loaded kStep column groups at a time with predicated, branch-free loads, so
  // their L2 latencies overlap; a data-dependent branch per group serialized them (W2 ran 4x
  // slower than cuBLASLt until this was fixed).
  __device__ __forceinline__ static void apply_fused_ops(const Fp8KernelParams& p, int r0, int c0, float alpha,
                                                         float (&acc)[T::kBlockN / 2]) {
    constexpr int kGroups = T::kBlockN / 8;
    constexpr int kStep = 4;
    static_assert(kGroups % kStep == 0, "column groups come in steps of 4");
    const gemm::EpilogueParams& e = p.epi;
    const bool row_ok[2] = {r0 < p.m, r0 + 8 < p.m};
    const __nv_bfloat16* bcast_row[2] = {nullptr, nullptr};
    const __nv_bfloat16* res_row[2] = {nullptr, nullptr};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (e.row_bcast != nullptr && row_ok[h]) bcast_row[h] = e.row_bcast + static_cast<int64_t>((r0 + 8 * h) % e.row_period) * p.n;
      if (e.residual != nullptr && row_ok[h]) res_row[h] = e.residual + static_cast<int64_t>(r0 + 8 * h) * p.n;
    }
    const int act = e.activation;
#pragma unroll
    for (int g0 = 0; g0 < kGroups; g0 += kStep) {
      float2 b[kStep], t[kStep][2], r[kStep][2];
#pragma unroll
      for (int j = 0; j < kStep; ++j) {
        const int col = c0 + 8 * (g0 + j);
        const bool col_ok = col < p.n;  // n is a multiple of 16, so col + 1 < n as well
        b[j] = (e.bias != nullptr && col_ok) ? load_pair(e.bias + col) : make_float2(0.0f, 0.0f);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          t[j][h] = (bcast_row[h] != nullptr && col_ok) ? load_pair(bcast_row[h] + col) : make_float2(0.0f, 0.0f);
          r[j][h] = (res_row[h] != nullptr && col_ok) ? load_pair(res_row[h] + col) : make_float2(0.0f, 0.0f);
        }
      }
#pragma unroll
      for (int j = 0; j < kStep; ++j) {
        const int g = g0 + j;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float v0 = fmaf(acc[4 * g + 2 * h], alpha, b[j].x) + t[j][h].x;
          float v1 = fmaf(acc[4 * g + 2 * h + 1], alpha, b[j].y) + t[j][h].y;
          if (act == static_cast<int>(gemm::EpilogueActivation::kGelu)) {
            v0 = gelu(v0);
            v1 = gelu(v1);
          } else if (act == static_cast<int>(gemm::EpilogueActivation::kSilu)) {
            v0 = silu(v0);
            v1 = silu(v1);
          }
          acc[4 * g + 2 * h] = v0 + r[j][h].x;
          acc[4 * g + 2 * h + 1] = v1 + r[j][h].y;
        }
      }
    }
  }

  __device__ __forceinline__ static float2 load_pair(const __nv_bfloat16* ptr) {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(ptr));
  }
  __device__ __forceinline__ static float gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
  __device__ __forceinline__ static float silu(float x) { return x / (1.0f + __expf(-x)); }

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
