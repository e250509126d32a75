#include <cuda_bf16.h>

#include "row_bcast_add.h"

namespace lowbit::bench {
namespace {

// One thread per 8 BF16 (16 bytes); n is a multiple of 16 so a vector never straddles rows.
__global__ void k_row_bcast_add(uint4* d, const uint4* t, int64_t vec_per_row, int64_t total_vec, int64_t period) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total_vec; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / vec_per_row;
    const int64_t col = i - row * vec_per_row;
    uint4 a = d[i];
    const uint4 b = __ldg(&t[(row % period) * vec_per_row + col]);
    __nv_bfloat162* pa = reinterpret_cast<__nv_bfloat162*>(&a);
    const __nv_bfloat162* pb = reinterpret_cast<const __nv_bfloat162*>(&b);
#pragma unroll
    for (int j = 0; j < 4; ++j) pa[j] = __hadd2(pa[j], pb[j]);
    d[i] = a;
  }
}

}  // namespace

cudaError_t row_bcast_add_bf16(void* d, const void* t, int64_t m, int64_t n, int64_t period, cudaStream_t s) {
  const int64_t vec_per_row = n / 8;
  const int64_t total = m * vec_per_row;
  int dev = 0, sms = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  const int64_t want = (total + 255) / 256;
  const int blocks = static_cast<int>(want < int64_t(sms) * 8 ? want : int64_t(sms) * 8);
  k_row_bcast_add<<<blocks > 0 ? blocks : 1, 256, 0, s>>>(static_cast<uint4*>(d), static_cast<const uint4*>(t),
                                                          vec_per_row, total, period);
  return cudaGetLastError();
}

}  // namespace lowbit::bench
