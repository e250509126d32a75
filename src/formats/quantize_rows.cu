// Per-token E4M3 quantization of BF16 rows (lowbit/quantize.h), optionally after the SwiGLU
// activation. One CTA per row: a first pass finds the row's amax, a second recomputes each value
// (its inputs are in L2 by then) and stores the codes. Recomputing instead of keeping the row
// in registers or shared memory serves any K with one kernel.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cmath>
#include <string>

#include "common/arg_check.h"
#include "formats/e4m3.h"
#include "formats/quantize.h"
#include "gemm/launch_common.h"
#include "hopper/grid_dependency.cuh"
#include "lowbit/quantize.h"

namespace lowbit {
namespace {

constexpr int kThreads = 256;

// Eight consecutive values of a row, from one 16-byte load (two for the SwiGLU form).
struct Plain {
  const __nv_bfloat16* x;
  int64_t ld;  // elements per input row
  __device__ __forceinline__ void load8(int64_t row, int64_t col, float (&v)[8]) const {
    const uint4 raw = __ldg(reinterpret_cast<const uint4*>(x + row * ld + col));
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __bfloat1622float2(h[i]);
      v[2 * i] = f.x;
      v[2 * i + 1] = f.y;
    }
  }
};

struct SiluMul {
  const __nv_bfloat16* x;
  int64_t inter;  // the up half starts this many elements into the row
  __device__ __forceinline__ void load8(int64_t row, int64_t col, float (&v)[8]) const {
    float g[8], u[8];
    Plain{x, 2 * inter}.load8(row, col, g);
    Plain{x, 2 * inter}.load8(row, inter + col, u);
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = g[i] / (1.0f + __expf(-g[i])) * u[i];
  }
};

__device__ __forceinline__ float block_max(float v, float* scratch) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = threadIdx.x / 32;
  if (threadIdx.x % 32 == 0) scratch[warp] = v;
  __syncthreads();
  v = threadIdx.x < kThreads / 32 ? scratch[threadIdx.x] : 0.0f;
  if (warp == 0) {
#pragma unroll
    for (int o = 4; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (threadIdx.x == 0) scratch[0] = v;
  }
  __syncthreads();
  return scratch[0];
}

template <class Source>
__global__ void __launch_bounds__(kThreads) quantize_rows_kernel(Source src, int64_t k, uint8_t* __restrict__ q,
                                                                 float* __restrict__ scales) {
  __shared__ float scratch[kThreads / 32];
  const int64_t row = blockIdx.x;
  float amax = 0.0f;
  bool finite = true;
  for (int64_t c = 8 * threadIdx.x; c < k; c += 8 * kThreads) {
    float v[8];
    src.load8(row, c, v);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      amax = fmaxf(amax, fabsf(v[i]));
      finite = finite && isfinite(v[i]);
    }
  }
  // fmaxf drops NaN: a non-finite value anywhere makes the whole row NaN instead.
  if (!finite) amax = INFINITY;
  amax = block_max(amax, scratch);
  const bool bad = isinf(amax);
  const float a = amax == 0.0f ? formats::kE4M3Max : fmaxf(amax, formats::kTensorAmaxFloor);
  const float inv = bad ? NAN : formats::kE4M3Max / a;
  if (threadIdx.x == 0) scales[row] = bad ? NAN : a / formats::kE4M3Max;
  for (int64_t c = 8 * threadIdx.x; c < k; c += 8 * kThreads) {
    float v[8];
    src.load8(row, c, v);
    uint2 out;
    uint16_t* o16 = reinterpret_cast<uint16_t*>(&out);
#pragma unroll
    for (int i = 0; i < 4; ++i)
      o16[i] = __nv_cvt_float2_to_fp8x2(make_float2(v[2 * i] * inv, v[2 * i + 1] * inv), __NV_SATFINITE, __NV_E4M3);
    *reinterpret_cast<uint2*>(q + row * k + c) = out;
  }
}

Status check_and_launch(const char* who, const void* x, int64_t x_cols, int64_t m, int64_t k, void* q, float* scales,
                        cudaStream_t stream, bool silu_mul) {
  using check::extent;
  check::ArgCheck c(who);
  c.dim("M", m, 1, INT32_MAX)
      .dim(silu_mul ? "inter" : "K", k, 16, INT32_MAX / 2)
      .ptr(silu_mul ? "gate_up" : "x", x, 16, check::Null::kRefused, extent(m, x_cols, 2))
      .out("q", q, 16, extent(m, k))
      .out("scales", scales, 4, extent(m, 4));
  LOWBIT_RETURN_IF_ERROR(c.device());
  cudaError_t e;
  if (silu_mul)
    e = hopper::launch_kernel(quantize_rows_kernel<SiluMul>, dim3(static_cast<unsigned>(m)), dim3(kThreads), 0, stream,
                              /*pdl=*/false, SiluMul{static_cast<const __nv_bfloat16*>(x), k}, k,
                              static_cast<uint8_t*>(q), scales);
  else
    e = hopper::launch_kernel(quantize_rows_kernel<Plain>, dim3(static_cast<unsigned>(m)), dim3(kThreads), 0, stream,
                              /*pdl=*/false, Plain{static_cast<const __nv_bfloat16*>(x), k}, k,
                              static_cast<uint8_t*>(q), scales);
  if (e != cudaSuccess) return gemm::cuda_error(who, e);
  return Status::Ok();
}

}  // namespace

Status quantize_fp8_per_token(const void* x, int64_t m, int64_t k, void* q, float* scales, cudaStream_t stream) {
  return check_and_launch("quantize_fp8_per_token", x, k, m, k, q, scales, stream, false);
}

Status silu_mul_quantize_fp8_per_token(const void* gate_up, int64_t m, int64_t inter, void* q, float* scales,
                                       cudaStream_t stream) {
  return check_and_launch("silu_mul_quantize_fp8_per_token", gate_up, 2 * inter, m, inter, q, scales, stream, true);
}

}  // namespace lowbit
