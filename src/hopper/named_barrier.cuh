// Named barriers (bar.sync with a thread count): the single home for them in lowbit.
// Barrier 0 is __syncthreads(); every other id a kernel uses comes from an enum like
// NamedBarrier below so that two roles never reuse an id by accident.
#pragma once

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

}  // namespace lowbit::hopper
