// Split-K fix-up without waiting: every split of a tile writes its FP32 partial to the
// workspace and counts itself in; the split that arrives last sums all partials in split order
// (so the result does not depend on which split finished last) and runs the epilogue.
// The last arrival also resets the tile's counter, so the workspace is ready for the next call.
#pragma once

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
#pragma unroll
  for (int j = 0; j < kVec; ++j)
    base[(static_cast<size_t>(w.split) * kVec + j) * threads + thread] =
        make_float4(acc[4 * j], acc[4 * j + 1], acc[4 * j + 2], acc[4 * j + 3]);
  __threadfence();
  // Every thread's partial is stored and fenced before thread 0 counts the split in; its verdict
  // reaches the others through the barrier's OR (a shared flag, rewritten by the next unit's
  // fix-up, was one more barrier and a write-after-read racecheck flagged).
  hopper::named_barrier_sync(hopper::NamedBarrier::kConsumers, threads);
  bool last = false;
  if (thread == 0) {
    last = atomicAdd(&tile_counters[w.tile], 1) == splits - 1;
    if (last) tile_counters[w.tile] = 0;
  }
  if (!hopper::named_barrier_sync_or(hopper::NamedBarrier::kConsumers, threads, last)) return false;
  __threadfence();
  // Sum every split's stored partial (this split's own included) in split order, so the
  // rounding is the same whichever split happens to arrive last.
#pragma unroll
  for (int j = 0; j < kVec; ++j) {
    const float4 v = __ldcg(&base[static_cast<size_t>(j) * threads + thread]);
    acc[4 * j] = v.x;
    acc[4 * j + 1] = v.y;
    acc[4 * j + 2] = v.z;
    acc[4 * j + 3] = v.w;
  }
  for (int s = 1; s < splits; ++s) {
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const float4 v = __ldcg(&base[(static_cast<size_t>(s) * kVec + j) * threads + thread]);
      acc[4 * j] += v.x;
      acc[4 * j + 1] += v.y;
      acc[4 * j + 2] += v.z;
      acc[4 * j + 3] += v.w;
    }
  }
  return true;
}

}  // namespace lowbit::gemm
