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
  kMmaIssuedWg0 = 4,     // consumer warpgroup 0 has issued its MMAs for a K block
  kMmaIssuedWg1 = 5,     // consumer warpgroup 1 has issued its MMAs for a K block
};

__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ void named_barrier_sync(NamedBarrier id, int threads) {
  named_barrier_sync(static_cast<int>(id), threads);
}

// Signals without waiting: the threads that bar.sync on the same id (with the same count) wait
// until these arrivals and their own add up to `threads`.
__device__ __forceinline__ void named_barrier_arrive(NamedBarrier id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(static_cast<int>(id)), "r"(threads) : "memory");
}

}  // namespace lowbit::hopper
