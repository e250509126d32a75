// Stage 3, quantize + gather (the seed's QSG): one block per token. The token's k slots are
// claimed first (one atomic per routing pair on its expert's counter), then each 128-wide K
// block is quantized once -- the host quantizer's 1x128 rule (formats/quantize.h), one
// reciprocal per block -- and written to all of the token's sorted rows (swap-AB: the sorted
// rows are the GEMM's B operand), or, for the token-rows GEMM (kTokenMajor), once, to the token's
// own row of xq with its scales [k / 128, m]: that GEMM gathers each sorted row from its token
// (gemm::produce_gathered_rows), so the k copies are never written (docs/perf.md block-scaled,
// "the gather in the A load").
// In atomic mode the token's FP32 output (or FP32 sums) row is zeroed here, ahead of the GEMM's
// atomics in stream order.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "formats/quantize_device.cuh"
#include "hopper/grid_dependency.cuh"
#include "moe/workspace.h"

namespace lowbit::moe {

constexpr int kGatherThreads = 256;
constexpr int kChunk = 256;  // K values one warp quantizes per step: two 128-wide blocks

// Claims routing pair `pair`'s sorted row (its expert's next slot) and records the pair and its
// weight there; -1 for a bad expert id or a stale layout (reported in the status word).
__device__ __forceinline__ int claim_row(const MoeParams& p, int pair) {
  const int e = p.ids[pair];
  if (static_cast<unsigned>(e) >= static_cast<unsigned>(p.experts)) return -1;
  const int slot = atomicAdd(&p.cursor[e], 1);
  if (slot >= p.counts[e]) {
    if (atomicCAS(&p.status[0], kMoeOk, kMoeStaleLayout) == kMoeOk) p.status[1] = pair;
    return -1;
  }
  const int row = p.offsets[e] + slot;
  p.row_pair[row] = pair;
  p.row_weight[row] = p.weights[pair];
  return row;
}

// Atomic mode: zeroes FP32 output rows [t0, t1) (or their FP32 sums) for the GEMM's atomics.
__device__ __forceinline__ void zero_output_rows(const MoeParams& p, int t0, int t1, int tid, int threads) {
  if (p.deterministic) return;
  float* z = (p.y_fp32 ? static_cast<float*>(p.y) : p.sums) + static_cast<int64_t>(t0) * p.n;
  const int64_t quads = static_cast<int64_t>(t1 - t0) * p.n / 4;
  for (int64_t i = tid; i < quads; i += threads) reinterpret_cast<float4*>(z)[i] = make_float4(0.f, 0.f, 0.f, 0.f);
}

// A warp's chunk is K values [k0, k0 + 256) of a token row, 8 per lane (each half warp one
// 128-wide block; K is a multiple of 128, so a half warp is wholly inside or wholly past the row).
__device__ __forceinline__ uint4 load_chunk(const __nv_bfloat16* __restrict__ xrow, int k0, int k) {
  const int kk = k0 + (threadIdx.x % 32) * 8;
  return kk < k ? *reinterpret_cast<const uint4*>(xrow + kk) : make_uint4(0, 0, 0, 0);
}

// Quantizes a loaded chunk (every lane takes part in the scale reduction) and writes it to rows
// rows[0..nrows) of xq (rows[j] < 0: none), the scales scale_ld apart per K block.
__device__ __forceinline__ void quantize_chunk(const uint4& raw, int k0, const int* rows, int nrows,
                                               int64_t scale_ld, const MoeParams& p) {
  const int lane = threadIdx.x % 32;
  const int kk = k0 + lane * 8;
  const bool inside = kk < p.k;
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
  const formats::BlockScale bs = formats::block_scale_1x128(amax);
  const uint2 q = formats::quantize8_e4m3(f, bs.inv);
  const float scale = bs.scale;
  for (int j = 0; j < nrows && inside; ++j) {
    const int row = rows[j];
    if (row < 0) continue;
    *reinterpret_cast<uint2*>(p.xq + static_cast<int64_t>(row) * p.k + kk) = q;
    if (lane % 16 == 0) p.x_scales[static_cast<int64_t>(kk / 128) * scale_ld + row] = scale;
  }
}

template <bool kTokenMajor>
__global__ void __launch_bounds__(kGatherThreads)
    quantize_gather_kernel(const __nv_bfloat16* __restrict__ x, MoeParams p) {
  __shared__ int s_row[kMaxTopK];
  hopper::launch_dependents();
  hopper::grid_dependency_wait();
  const int t = blockIdx.x, tid = threadIdx.x;
  constexpr int kStep = kGatherThreads / 32 * kChunk;
  // Each warp's first chunk is in flight while the slots are claimed.
  const __nv_bfloat16* xrow = x + static_cast<int64_t>(t) * p.k;
  const int k_first = (tid / 32) * kChunk;
  const uint4 first = load_chunk(xrow, k_first, p.k);
  if (tid < p.top_k) s_row[tid] = claim_row(p, t * p.top_k + tid);
  zero_output_rows(p, t, t + 1, tid, kGatherThreads);
  __syncthreads();
  const int* rows = kTokenMajor ? &t : s_row;
  const int nrows = kTokenMajor ? 1 : p.top_k;
  const int64_t scale_ld = kTokenMajor ? p.m : p.rows;
  if (k_first < p.k) quantize_chunk(first, k_first, rows, nrows, scale_ld, p);
  for (int k0 = k_first + kStep; k0 < p.k; k0 += kStep)
    quantize_chunk(load_chunk(xrow, k0, p.k), k0, rows, nrows, scale_ld, p);
}

}  // namespace lowbit::moe
