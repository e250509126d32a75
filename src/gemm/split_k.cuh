// Split-K fix-up without waiting: every split of a tile writes its FP32 partial to the
// workspace and counts itself in; the split that arrives last sums all partials in split order
// (so the result does not depend on which split finished last) and runs the epilogue.
// The last arrival also resets the tile's counter, so the workspace is ready for the next call.
#pragma once

#include <cuda/atomic>

#include <cstdint>

#include "gemm/tile_scheduler.cuh"
#include "hopper/named_barrier.cuh"

namespace lowbit::gemm {

// Partials are stored in fragment order ([tile][split][reg/4][thread] as float4), so each
// thread reads back exactly the values it would have held: coalesced, and no layout change.
// Returns true in the split that must finish the tile. All `threads` consumer threads call it.
template <int kRegs>
__device__ __forceinline__ bool split_k_fixup(float (&acc)[kRegs], const WorkUnit& w, int splits,
                                              float* partials, int* tile_counters, int thread, int threads) {
  static_assert(kRegs % 4 == 0, "fragments are stored as float4");
  constexpr int kVec = kRegs / 4;
  float4* base = reinterpret_cast<float4*>(partials) + static_cast<size_t>(w.tile) * splits * kVec * threads;
  // Split s's float4 j of this thread.
  const auto slot = [&](int s, int j) { return base + (static_cast<size_t>(s) * kVec + j) * threads + thread; };
#pragma unroll
  for (int j = 0; j < kVec; ++j)
    *slot(w.split, j) = make_float4(acc[4 * j], acc[4 * j + 1], acc[4 * j + 2], acc[4 * j + 3]);
  // Only thread 0 publishes: the barrier orders every consumer thread's partial before its
  // release (acq_rel at GPU scope is cumulative over what the barrier made it observe), and its
  // acquire orders the other splits' partials before the reads below, which the second barrier
  // passes on. (Before, every thread ran a sequentially consistent __threadfence: 256
  // MEMBAR.SC.GPU per unit, ~10% of the stall samples of 128x4096x7168 at splits = 2.)
  // Its verdict reaches the others through the barrier's OR (a shared flag, rewritten by the next
  // unit's fix-up, was one more barrier and a write-after-read racecheck flagged).
  hopper::named_barrier_sync(hopper::NamedBarrier::kConsumers, threads);
  bool last = false;
  if (thread == 0) {
    cuda::atomic_ref<int, cuda::thread_scope_device> counter(tile_counters[w.tile]);
    last = counter.fetch_add(1, cuda::memory_order_acq_rel) == splits - 1;
    if (last) counter.store(0, cuda::memory_order_relaxed);
  }
  if (!hopper::named_barrier_sync_or(hopper::NamedBarrier::kConsumers, threads, last)) return false;
  // Sum every split's partial in split order, so the rounding is the same whichever split
  // arrives last. This split's own partial is still in `acc`: where it is split 0 or 1 it joins
  // in place (p0 + p1 == p1 + p0 exactly), one round of loads fewer on the critical path.
  // A later split re-reads its own partial: acc starts from split 0's.
  if (w.split > 1) {
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const float4 v = __ldcg(slot(0, j));
      acc[4 * j] = v.x;
      acc[4 * j + 1] = v.y;
      acc[4 * j + 2] = v.z;
      acc[4 * j + 3] = v.w;
    }
  }
  const int in_acc = w.split <= 1 ? w.split : 0;  // the split whose partial acc already holds
  for (int s = w.split == 1 ? 0 : 1; s < splits; ++s) {
    if (s == in_acc) continue;
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const float4 v = __ldcg(slot(s, j));
      acc[4 * j] += v.x;
      acc[4 * j + 1] += v.y;
      acc[4 * j + 2] += v.z;
      acc[4 * j + 3] += v.w;
    }
  }
  return true;
}

}  // namespace lowbit::gemm
