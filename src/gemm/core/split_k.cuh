// Split-K: the splits of a tile each hold an FP32 partial of it; one of them sums all partials in
// split order (so the rounding does not depend on which split finished first) and runs the
// epilogue. Two transports:
//  - through the workspace (split_k_fixup): every split writes its partial to global memory and
//    counts itself in; the split that arrives last sums. Any number of splits, any grid; the last
//    arrival resets the tile's counter, so the workspace is ready for the next call. It costs the
//    last split three serial L2 round trips (its own partial and fence, the count, the reads):
//    1.4-2.0 us of every small-M block-scaled time (docs/perf.md block-scaled, "The fix-up alone").
//  - within a cluster (split_k_cluster_reduce): the splits of a tile are the CTAs of one cluster,
//    split r on rank r; ranks >= 1 push their partials into rank 0's shared memory with st.async,
//    counted on rank 0's barrier, and rank 0 sums. No workspace, no fence and one hop of
//    distributed shared memory; rank 0 lands the first partial in its epilogue staging, so a
//    kernel for 1 + kExtra splits holds kExtra tiles of slots.
#pragma once

#include <cuda/atomic>

#include <cstdint>
#include <type_traits>

#include "gemm/core/tile_scheduler.cuh"
#include "hopper/cluster.cuh"
#include "hopper/mbarrier.cuh"
#include "hopper/named_barrier.cuh"
#include "hopper/shared_storage.cuh"
#include "hopper/tma.cuh"

namespace lowbit::gemm {

// Four consecutive accumulators of a partial, from `at` on, summed in place: both transports add
// the other splits' partials this way.
template <int kRegs>
__device__ __forceinline__ void add_partial4(float (&acc)[kRegs], int at, float4 v) {
  acc[at] += v.x;
  acc[at + 1] += v.y;
  acc[at + 2] += v.z;
  acc[at + 3] += v.w;
}

// Partials are stored in fragment order ([tile][split][reg/4][thread] as float4), so each
// thread reads back exactly the values it would have held: coalesced, and no layout change.
// Returns true in the split that must finish the tile. All `threads` consumer threads call it.
// `base`: the tile's split 0 partial (split_k_fixup, split_k_fixup_at).
template <int kRegs>
__device__ __forceinline__ bool split_k_fixup_from(float (&acc)[kRegs], const WorkUnit& w, int splits, float4* base,
                                                   int* tile_counters, int thread, int threads) {
  static_assert(kRegs % 4 == 0, "fragments are stored as float4");
  constexpr int kVec = kRegs / 4;
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
      add_partial4(acc, 4 * j, __ldcg(slot(s, j)));
    }
  }
  return true;
}

// Every tile has `splits` partials, tile t's from slot t * splits on.
template <int kRegs>
__device__ __forceinline__ bool split_k_fixup(float (&acc)[kRegs], const WorkUnit& w, int splits,
                                              float* partials, int* tile_counters, int thread, int threads) {
  constexpr int kVec = kRegs / 4;
  float4* base = reinterpret_cast<float4*>(partials) + static_cast<size_t>(w.tile) * splits * kVec * threads;
  return split_k_fixup_from(acc, w, splits, base, tile_counters, thread, threads);
}

// The tile's partials from slot `first_slot` on (a stream-K tile's pieces: StreamKWalk).
template <int kRegs>
__device__ __forceinline__ bool split_k_fixup_at(float (&acc)[kRegs], const WorkUnit& w, int splits, int64_t first_slot,
                                                 float* partials, int* tile_counters, int thread, int threads) {
  constexpr int kVec = kRegs / 4;
  float4* base = reinterpret_cast<float4*>(partials) + static_cast<size_t>(first_slot) * kVec * threads;
  return split_k_fixup_from(acc, w, splits, base, tile_counters, thread, threads);
}

// The most splits T's kernel reduces within a cluster (T::kClusterSplits; 0 where T has no
// slots: the workspace transport only).
template <class T, class = void>
struct ClusterSplitK : std::integral_constant<int, 0> {};
template <class T>
struct ClusterSplitK<T, std::void_t<decltype(T::kClusterSplits)>> : std::integral_constant<int, T::kClusterSplits> {};

// Rank 0's landing places for the other ranks' partials: its epilogue staging for rank 1 (free
// while rank 0 reduces: its previous unit's stores have read it, and this unit's are not staged
// yet), kExtra more slots for ranks 2 ... 1 + kExtra. A partial lies in fragment order per
// consumer warpgroup, [warpgroup][float4 j][thread of the warpgroup], so each thread of rank 0 reads
// back exactly its own values, conflict-free, and a warpgroup's partial from the staging lies in
// its own staging (the epilogue's warpgroup barrier orders the reads before the output's writes).
// `full` (rank 0's): rank 0 arms it with the bytes, the other ranks' st.async complete them.
// `free` (every other rank's): each consumer warpgroup of rank 0 arrives once its stores have read
// the staging and it has read the slots, so the rank may push its next partial.
struct ClusterSplitBarriers {
  uint64_t full;
  uint64_t free;
  __device__ __forceinline__ void init(uint32_t consumer_warpgroups) {
    hopper::mbarrier_init(&full, 1);
    hopper::mbarrier_init(&free, consumer_warpgroups);
  }
};
template <int kVec, int kThreads, int kExtra>
struct ClusterSplitLanding : ClusterSplitBarriers {
  static constexpr int kMaxSplits = 2 + kExtra;
  float4 extra[kExtra][kVec * kThreads];
};
template <int kVec, int kThreads>
struct ClusterSplitLanding<kVec, kThreads, 0> : ClusterSplitBarriers {
  static constexpr int kMaxSplits = 2;
};

// A kernel's shared storage with the landing places for up to kSplits splits reduced in a
// cluster (Storage itself where kSplits <= 1: the workspace transport only). Tiles of kBlockN
// columns, kWarpgroups consumer warpgroups.
template <class Storage, int kVec, int kThreads, int kSplits>
struct ClusterLandingStorage : Storage {
  ClusterSplitLanding<kVec, kThreads, kSplits - 2> csplit;
};
template <class Storage, int kBlockN, int kWarpgroups, int kSplits>
using WithClusterLanding =
    std::conditional_t<(kSplits > 1), ClusterLandingStorage<Storage, kBlockN / 8, kWarpgroups * 128, kSplits>, Storage>;
// The landing slots beyond the epilogue staging, in bytes, for kernels that cost them stages.
constexpr int cluster_landing_bytes(int block_m, int block_n, int cluster_splits) {
  return cluster_splits > 2 ? (cluster_splits - 2) * block_m * block_n * 4 : 0;
}

// Where split r >= 1's float4 j of consumer thread `thread` lands in rank 0.
template <int kVec, class Landing>
__device__ __forceinline__ float4* landing_slot(Landing& l, float4* staging, int r, int j, int thread) {
  float4* base = staging;
  if constexpr (Landing::kMaxSplits > 2)
    if (r > 1) base = l.extra[r - 2];
  return base + (thread / 128) * (kVec * 128) + j * 128 + thread % 128;
}

// The split-K reduction within a cluster (see the top of this file). All `threads` consumer
// threads of every CTA call it once per unit; `parity` flips with every unit the CTA walks (every
// unit of a launch is split the same way). w.split is this CTA's rank: a grid of whole clusters
// walks unit b + i * grid on CTA b, so split u % splits lands on rank b % splits, and a CTA keeps
// its rank's role for every unit. Returns true in rank 0, whose acc then holds the sum, added in
// split order as the workspace's fix-up adds (the same bits). Rank 0 hands the landing places
// back after its epilogue (split_k_cluster_release).
template <int kRegs, class Landing>
__device__ __forceinline__ bool split_k_cluster_reduce(float (&acc)[kRegs], const WorkUnit& w, int splits,
                                                       Landing& l, float4* staging, uint32_t parity, int thread,
                                                       int threads) {
  static_assert(kRegs % 4 == 0, "fragments move as float4");
  constexpr int kVec = kRegs / 4;
  if (w.split != 0) {
    // Rank 0 has taken this CTA's previous partial (a fresh barrier reports the phase before the
    // first complete). The registers are free at issue: the next unit's mainloop starts at once.
    hopper::mbarrier_wait_cluster(&l.free, parity ^ 1u);
#pragma unroll
    for (int j = 0; j < kVec; ++j)
      hopper::st_async_peer(landing_slot<kVec>(l, staging, w.split, j, thread),
                            make_float4(acc[4 * j], acc[4 * j + 1], acc[4 * j + 2], acc[4 * j + 3]), &l.full, 0);
    return false;
  }
  if (thread == 0)
    hopper::mbarrier_arrive_expect_tx(&l.full, static_cast<uint32_t>((splits - 1) * kVec * 16 * threads));
  hopper::mbarrier_wait_cluster(&l.full, parity);
  for (int r = 1; r < splits; ++r) {
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      add_partial4(acc, 4 * j, hopper::ld_shared_f32x4(landing_slot<kVec>(l, staging, r, j, thread)));
    }
  }
  return true;
}

// Rank 0, after the epilogue of a reduced unit that is followed by another: each consumer
// warpgroup's store thread waits until its stores have read the staging, then tells every other
// rank its landing place is free (relaxed, as the stage ring hands stages back across a cluster:
// the slots' reads returned before the epilogue's writes, which the store read). Not after the
// last unit: the other ranks may have exited.
template <class Landing>
__device__ __forceinline__ void split_k_cluster_release(Landing& l, int splits, int thread) {
  if (thread % 128 != 0) return;
  hopper::tma_store_wait_read<0>();
  for (int r = 1; r < splits; ++r) hopper::mbarrier_arrive_peer(&l.free, static_cast<uint32_t>(r));
}

}  // namespace lowbit::gemm
