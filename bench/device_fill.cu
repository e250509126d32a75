#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "device_fill.h"

namespace lowbit::bench {
namespace {

__device__ __forceinline__ uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

__device__ __forceinline__ float uniform_pm1(uint64_t seed, size_t i) {
  const uint64_t h = mix(seed * 0x100000001B3ull ^ mix(i));
  return static_cast<float>(h >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

__global__ void k_fill_e4m3_uniform(uint8_t* dst, size_t n, float range, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    dst[i] = __nv_cvt_float_to_fp8(uniform_pm1(seed, i) * range, __NV_SATFINITE, __NV_E4M3);
}

__global__ void k_fill_e4m3_int(uint8_t* dst, size_t n, int lim, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const int v = static_cast<int>(mix(seed ^ mix(i)) % static_cast<uint64_t>(2 * lim + 1)) - lim;
    dst[i] = __nv_cvt_float_to_fp8(static_cast<float>(v), __NV_SATFINITE, __NV_E4M3);
  }
}

__global__ void k_fill_bf16_uniform(__nv_bfloat16* dst, size_t n, float range, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    dst[i] = __float2bfloat16_rn(uniform_pm1(seed, i) * range);
}

__global__ void k_fill_u8_range(uint8_t* dst, size_t n, int lo, int hi, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    dst[i] = static_cast<uint8_t>(lo + static_cast<int>(mix(seed ^ mix(i)) % static_cast<uint64_t>(hi - lo + 1)));
}

__global__ void k_fill_f32_scales(float* dst, size_t n, int lo_exp, int hi_exp, bool pow2, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint64_t h = mix(seed ^ mix(i));
    const int e = lo_exp + static_cast<int>(h % static_cast<uint64_t>(hi_exp - lo_exp + 1));
    // Not a power of two: a mantissa in [1, 2) as well.
    const float mant = pow2 ? 1.0f : 1.0f + static_cast<float>((h >> 32) & 0xFFFFFF) / 16777216.0f;
    dst[i] = ldexpf(mant, e);
  }
}

__global__ void k_fill_u16(uint16_t* dst, size_t n, uint16_t bits) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    dst[i] = bits;
}

__global__ void k_fill_f16_uniform(__half* dst, size_t n, float range, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    dst[i] = __float2half_rn(uniform_pm1(seed, i) * range);
}

// Zeroes two of every four consecutive elements (a hashed choice of the 6 pairs per group).
template <class E>
__global__ void k_mask_2_4(E* dst, size_t groups, uint64_t seed) {
  constexpr uint8_t kPairs[6][2] = {{0, 1}, {0, 2}, {0, 3}, {1, 2}, {1, 3}, {2, 3}};
  for (size_t g = blockIdx.x * size_t(blockDim.x) + threadIdx.x; g < groups; g += size_t(gridDim.x) * blockDim.x) {
    const int p = static_cast<int>(mix(seed ^ mix(g)) % 6);
    dst[4 * g + kPairs[p][0]] = E{};
    dst[4 * g + kPairs[p][1]] = E{};
  }
}

int blocks_for(size_t n) {
  const size_t b = (n + 255) / 256;
  return static_cast<int>(b < 65535 ? (b == 0 ? 1 : b) : 65535);
}

}  // namespace

cudaError_t fill_e4m3_uniform(void* dst, size_t count, float range, uint64_t seed, cudaStream_t s) {
  k_fill_e4m3_uniform<<<blocks_for(count), 256, 0, s>>>(static_cast<uint8_t*>(dst), count, range, seed);
  return cudaGetLastError();
}
cudaError_t fill_e4m3_int(void* dst, size_t count, int lim, uint64_t seed, cudaStream_t s) {
  k_fill_e4m3_int<<<blocks_for(count), 256, 0, s>>>(static_cast<uint8_t*>(dst), count, lim, seed);
  return cudaGetLastError();
}
cudaError_t fill_bf16_uniform(void* dst, size_t count, float range, uint64_t seed, cudaStream_t s) {
  k_fill_bf16_uniform<<<blocks_for(count), 256, 0, s>>>(static_cast<__nv_bfloat16*>(dst), count, range, seed);
  return cudaGetLastError();
}
cudaError_t fill_u8_range(void* dst, size_t count, int lo, int hi, uint64_t seed, cudaStream_t s) {
  k_fill_u8_range<<<blocks_for(count), 256, 0, s>>>(static_cast<uint8_t*>(dst), count, lo, hi, seed);
  return cudaGetLastError();
}

cudaError_t fill_f32_scales(float* dst, size_t count, int lo_exp, int hi_exp, bool pow2, uint64_t seed,
                            cudaStream_t s) {
  k_fill_f32_scales<<<blocks_for(count), 256, 0, s>>>(dst, count, lo_exp, hi_exp, pow2, seed);
  return cudaGetLastError();
}

cudaError_t fill_u16(void* dst, size_t count_u16, uint16_t bits, cudaStream_t s) {
  k_fill_u16<<<blocks_for(count_u16), 256, 0, s>>>(static_cast<uint16_t*>(dst), count_u16, bits);
  return cudaGetLastError();
}

cudaError_t fill_f16_uniform(void* dst, size_t count, float range, uint64_t seed, cudaStream_t s) {
  k_fill_f16_uniform<<<blocks_for(count), 256, 0, s>>>(static_cast<__half*>(dst), count, range, seed);
  return cudaGetLastError();
}

cudaError_t mask_2_4(void* dst, size_t count, int elem_bytes, uint64_t seed, cudaStream_t s) {
  if (elem_bytes == 1) k_mask_2_4<<<blocks_for(count / 4), 256, 0, s>>>(static_cast<uint8_t*>(dst), count / 4, seed);
  else k_mask_2_4<<<blocks_for(count / 4), 256, 0, s>>>(static_cast<uint16_t*>(dst), count / 4, seed);
  return cudaGetLastError();
}

}  // namespace lowbit::bench
