// The unfused pipeline's second kernel (W2 baseline): D[r, :] += T[r mod P, :] in BF16,
// 16-byte vectorized and coalesced -- what a user writes after a GEMM that has no such epilogue.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace lowbit::bench {

cudaError_t row_bcast_add_bf16(void* d, const void* t, int64_t m, int64_t n, int64_t period, cudaStream_t s);

}  // namespace lowbit::bench
