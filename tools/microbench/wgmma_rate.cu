// How many SM cycles one m64nNk32 E4M3 wgmma (A and B from shared memory, 128-byte swizzle)
// occupies the tensor pipe, per N. Answers whether a narrower N costs proportionally less: the
// question behind tiles 8 or 16 columns narrower than 256 (docs/perf.md W1 session 27).
// One CTA per SM, two warpgroups each issuing groups of 4 wgmmas (one 128-byte K block) into its
// own accumulator, one group in flight while the next is issued -- the GEMM's issue pattern.
// Prints cycles per wgmma per SM (clock64 over the loop, the SM's two warpgroups together).
// Build: nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -Isrc tools/microbench/wgmma_rate.cu
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdint>

#include "hopper/wgmma.cuh"

using namespace lowbit;

template <int N>
__global__ void __launch_bounds__(256, 1) wgmma_rate(long long* cycles, float* sink, int iters) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 900)
  extern __shared__ __align__(1024) uint8_t smem[];
  uint8_t* base = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem) + 1023) & ~uintptr_t(1023));
  uint8_t* a = base;                 // 2 x 64 rows x 128 bytes
  uint8_t* b = base + 2 * 64 * 128;  // 256 rows x 128 bytes
  // Small nonzero E4M3 values (0x38 = 1.0, 0x30 = 0.5) so the pipe does real work.
  for (int i = threadIdx.x; i < (2 * 64 + 256) * 128; i += blockDim.x) base[i] = (i * 7 % 5 == 0) ? 0x38 : 0x30;
  __syncthreads();
  const int wg = threadIdx.x / 128;
  using Op = hopper::WgmmaOp<hopper::WgmmaKind::kE4M3, N>;
  const uint64_t da = hopper::make_smem_desc(a + wg * 64 * 128, 0, 1024, hopper::SmemSwizzle::k128B);
  const uint64_t db = hopper::make_smem_desc(b, 0, 1024, hopper::SmemSwizzle::k128B);
  float acc[N / 2];
#pragma unroll
  for (int i = 0; i < N / 2; ++i) acc[i] = 0.0f;
  const long long t0 = clock64();
  for (int it = 0; it < iters; ++it) {
    hopper::wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < 4; ++ks)
      Op::mma(acc, hopper::advance_desc(da, ks * 32), hopper::advance_desc(db, ks * 32), true);
    hopper::wgmma_commit_group();
    hopper::wgmma_wait_group<1>();
  }
  hopper::wgmma_wait_group<0>();
  hopper::fence_operands(acc);
  __syncthreads();
  const long long t1 = clock64();
  if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < N / 2; ++i) s += acc[i];
  if (s == 12345.0f) sink[threadIdx.x] = s;  // keeps the MMAs alive
#endif
}

template <int N>
void run(int sms, long long* d_cycles, float* d_sink) {
  const int iters = 20000;
  const int smem = (2 * 64 + 256) * 128 + 1024;
  cudaFuncSetAttribute(wgmma_rate<N>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  wgmma_rate<N><<<sms, 256, smem>>>(d_cycles, d_sink, 100);  // warm-up
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  cudaEventRecord(e0);
  wgmma_rate<N><<<sms, 256, smem>>>(d_cycles, d_sink, iters);
  cudaEventRecord(e1);
  cudaEventSynchronize(e1);
  float ms = 0;
  cudaEventElapsedTime(&ms, e0, e1);
  long long h[1024];
  cudaMemcpy(h, d_cycles, sizeof(long long) * sms, cudaMemcpyDeviceToHost);
  long long mx = 0, sum = 0;
  for (int i = 0; i < sms; ++i) {
    mx = h[i] > mx ? h[i] : mx;
    sum += h[i];
  }
  const double per = static_cast<double>(sum) / sms / (2.0 * 4.0 * iters);
  printf("n%-4d %8.2f cycles/wgmma/SM  %6.3f cycles per 8 columns  (max CTA %.2f)  %.3f ms  %s\n", N, per,
         per / (N / 8), static_cast<double>(mx) / (2.0 * 4.0 * iters), ms, cudaGetErrorString(cudaGetLastError()));
}

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  long long* d_cycles;
  float* d_sink;
  cudaMalloc(&d_cycles, sizeof(long long) * 1024);
  cudaMalloc(&d_sink, sizeof(float) * 256);
  run<64>(sms, d_cycles, d_sink);
  run<96>(sms, d_cycles, d_sink);
  run<112>(sms, d_cycles, d_sink);
  run<120>(sms, d_cycles, d_sink);
  run<128>(sms, d_cycles, d_sink);
  run<176>(sms, d_cycles, d_sink);
  run<240>(sms, d_cycles, d_sink);
  run<248>(sms, d_cycles, d_sink);
  run<256>(sms, d_cycles, d_sink);
  run<128>(sms, d_cycles, d_sink);
  run<120>(sms, d_cycles, d_sink);
  return 0;
}
