// Named barriers (bar.sync with a thread count): the single home for them in lowbit.
// Barrier 0 is __syncthreads(); every other id a kernel uses comes from an enum like
// NamedBarrier below so that two roles never reuse an id by accident.
#pragma once

#include <cstdint>

namespace lowbit::hopper {

enum class NamedBarrier : int {
  kBlockSync = 0,        // reserved: __syncthreads()
  kConsumers = 1,        // all consumer warpgroups together (split-K fixup)
  kEpilogueWg0 = 2,      // consumer warpgroup 0's epilogue staging
  kEpilogueWg1 = 3,      // consumer warpgroup 1's epilogue staging
};

__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ void named_barrier_sync(NamedBarrier id, int threads) {
  named_barrier_sync(static_cast<int>(id), threads);
}

// bar.sync that also ORs a predicate over every participating thread (bar.red.or): a decision one
// thread made reaches all of them without a shared-memory flag and a second barrier.
__device__ __forceinline__ bool named_barrier_sync_or(NamedBarrier id, int threads, bool pred) {
  uint32_t any;
  asm volatile(
      "{\n"
      "  .reg .pred q, r;\n"
      "  setp.ne.u32 q, %1, 0;\n"
      "  bar.red.or.pred r, %2, %3, q;\n"
      "  selp.u32 %0, 1, 0, r;\n"
      "}\n"
      : "=r"(any)
      : "r"(static_cast<uint32_t>(pred)), "r"(static_cast<int>(id)), "r"(threads)
      : "memory");
  return any != 0;
}

}  // namespace lowbit::hopper
