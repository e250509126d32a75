// Stage 5, finish (BF16 output or deterministic mode): the FP32 sums -> Y, four outputs per
// thread. Deterministic: Y[t] = sum over j = 0..k-1 of the GEMM's weighted row of pair
// (t, j), always in that order; pairs with a bad expert id have no row and add nothing.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "hopper/grid_dependency.cuh"
#include "moe/workspace.h"

namespace lowbit::moe {

constexpr int kFinishThreads = 256;

__global__ void __launch_bounds__(kFinishThreads) finish_kernel(MoeParams p) {
  hopper::launch_dependents();
  hopper::grid_dependency_wait();
  const int64_t i4 = static_cast<int64_t>(blockIdx.x) * kFinishThreads + threadIdx.x;
  const int n4 = p.n / 4;
  if (i4 >= static_cast<int64_t>(p.m) * n4) return;
  const int t = static_cast<int>(i4 / n4), n = static_cast<int>(i4 % n4) * 4;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  if (p.deterministic) {
    for (int j = 0; j < p.top_k; ++j) {
      const int pair = t * p.top_k + j;
      if (static_cast<unsigned>(p.ids[pair]) >= static_cast<unsigned>(p.experts)) continue;
      const float4 v = *reinterpret_cast<const float4*>(p.sums + static_cast<int64_t>(pair) * p.n + n);
      acc.x += v.x;
      acc.y += v.y;
      acc.z += v.z;
      acc.w += v.w;
    }
  } else {
    acc = *reinterpret_cast<const float4*>(p.sums + static_cast<int64_t>(t) * p.n + n);
  }
  const int64_t o = static_cast<int64_t>(t) * p.n + n;
  if (p.y_fp32) {
    *reinterpret_cast<float4*>(static_cast<float*>(p.y) + o) = acc;
  } else {
    __nv_bfloat162 h[2] = {__floats2bfloat162_rn(acc.x, acc.y), __floats2bfloat162_rn(acc.z, acc.w)};
    *reinterpret_cast<uint2*>(static_cast<__nv_bfloat16*>(p.y) + o) = *reinterpret_cast<uint2*>(h);
  }
}

}  // namespace lowbit::moe
