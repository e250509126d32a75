// L2 eviction priorities: the 64-bit policy operand of an access's .L2::cache_hint, made by
// createpolicy (CCCL's cuda::ptx has no wrapper for it). The single home for createpolicy.
#pragma once

#include <cstdint>

namespace lowbit::hopper {

// Lines an access brings or touches with this policy are the first L2 evicts: for data streamed
// once, so that what is read again stays.
__device__ __forceinline__ uint64_t l2_evict_first_policy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}

}  // namespace lowbit::hopper
