// Division by a divisor fixed before the launch, as a multiply-high, an add and a shift
// (Granlund & Montgomery, "Division by invariant integers using multiplication", 1994).
// A 32-bit division by a run-time value compiles to ~25 dependent instructions; a persistent
// kernel that places each unit with several of them stalls its tensor cores between units
// (docs/perf.md, W1 v14).
#pragma once

#include <cuda_runtime.h>  // __host__ __device__ for host-only includers

#include <cstdint>

namespace lowbit {

struct FastDiv {
  int d = 1;           // the divisor, 1 <= d < 2^31
  uint32_t mul = 1;    // floor(2^32 * (2^shift - d) / d) + 1
  uint32_t shift = 0;  // ceil(log2(d))

  FastDiv() = default;
  // Host only (the magic is computed once per launch).
  explicit FastDiv(int divisor) : d(divisor < 1 ? 1 : divisor) {
    while ((uint64_t{1} << shift) < static_cast<uint64_t>(d)) ++shift;
    // (2^shift - d) < d <= 2^31, so the product fits 63 bits and mul < 2^32 - 1.
    mul = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << shift) - static_cast<uint64_t>(d))) /
                                    static_cast<uint64_t>(d) +
                                1);
  }

  // n / d for 0 <= n < 2^31: hi(n * mul) <= n, so the sum stays below 2^32.
  __host__ __device__ __forceinline__ int div(int n) const {
    const uint32_t u = static_cast<uint32_t>(n);
#ifdef __CUDA_ARCH__
    const uint32_t hi = __umulhi(u, mul);
#else
    const uint32_t hi = static_cast<uint32_t>((static_cast<uint64_t>(u) * mul) >> 32);
#endif
    return static_cast<int>((hi + u) >> shift);
  }
};

}  // namespace lowbit
