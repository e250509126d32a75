// mbarrier: the single home for mbarrier use in lowbit, built on CCCL's cuda::ptx.
// A Stage ring (full/empty barrier per stage, phase tracked by the caller) connects one TMA
// producer to consumer warpgroups.
#pragma once

#include <cuda/ptx>
#include <cstdint>

#include "hopper/cluster.cuh"

namespace lowbit::hopper {

__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t count) {
  cuda::ptx::mbarrier_init(bar, count);
}

// Makes mbarrier.init visible to the async proxy (TMA) and, with clusters, to peer CTAs.
__device__ __forceinline__ void mbarrier_init_fence() {
  cuda::ptx::fence_mbarrier_init(cuda::ptx::sem_release, cuda::ptx::scope_cluster);
}

// Spins until the phase with the given parity has completed.
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) {
  while (!cuda::ptx::mbarrier_try_wait_parity(bar, parity)) {
  }
}

// The same at cluster scope: the phase was completed by another CTA of the cluster (a peer's
// st.async bytes), whose writes this thread then reads.
__device__ __forceinline__ void mbarrier_wait_cluster(uint64_t* bar, uint32_t parity) {
  while (!cuda::ptx::mbarrier_try_wait_parity(cuda::ptx::sem_acquire, cuda::ptx::scope_cluster, bar, parity)) {
  }
}

__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
  (void)cuda::ptx::mbarrier_arrive(bar);
}

// One arrival where `arrive` holds, as a predicated instruction rather than a branch: the
// overlapped kernels arrive from one lane per warp while wgmmas are in flight, where a branch
// would make ptxas serialize them (C7518). cuda::ptx has no predicated form.
__device__ __forceinline__ void mbarrier_arrive_if(bool arrive, uint64_t* bar) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %0, 0;\n"
      "@p mbarrier.arrive.shared::cta.b64 _, [%1];\n"
      "}\n" ::"r"(static_cast<int>(arrive)),
      "r"(static_cast<uint32_t>(__cvta_generic_to_shared(bar)))
      : "memory");
}

// The producer's arrival: one arrive plus the number of bytes TMA will complete on it.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  (void)cuda::ptx::mbarrier_arrive_expect_tx(cuda::ptx::sem_release, cuda::ptx::scope_cta,
                                             cuda::ptx::space_shared, bar, bytes);
}

// Position in a ring of kStages buffers; the phase bit flips each time the ring wraps.
// Producer and consumers each keep one and advance it in the same order.
template <int kStages>
struct RingPosition {
  int stage = 0;
  uint32_t phase = 0;
  __device__ __forceinline__ void advance() {
    if (++stage == kStages) {
      stage = 0;
      phase ^= 1u;
    }
  }
};

// full[s]: the producer arms it with the tile's byte count and TMA completes it.
// empty[s]: every consumer warp arrives once it no longer reads stage s.
// peers_free[s] (CTA clusters whose producers multicast into each other's stages): every peer's
// relay thread arrives once that peer's consumers have released stage s, so this producer may
// write into the peer's copy (relay_to_peers, wait_peers).
template <int kStages>
struct StageBarriers {
  uint64_t full[kStages];
  uint64_t empty[kStages];
  uint64_t peers_free[kStages];

  // `peers`: the other CTAs of the cluster that multicast into this CTA's stages (0: none).
  // `fill_arrivals`: arrivals that complete a fill, the producer's (with the TMA byte count) and
  // any its per-thread copies make when they land (cp.async arrivals).
  __device__ __forceinline__ void init(uint32_t consumer_arrivals, uint32_t peers = 0, uint32_t fill_arrivals = 1) {
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(&full[s], fill_arrivals);
      mbarrier_init(&empty[s], consumer_arrivals);
      if (peers > 0) mbarrier_init(&peers_free[s], peers);
    }
  }
  // A fresh barrier reports its preceding (parity 1) phase complete, so the producer's first
  // pass over the ring does not wait.
  __device__ __forceinline__ void producer_acquire(const RingPosition<kStages>& p) {
    mbarrier_wait(&empty[p.stage], p.phase ^ 1u);
  }
  // CTA clusters whose producers multicast into each other's stages. The relay (one thread of
  // each CTA, apart from the producer and the consumers, so no remote round trip sits in their
  // paths) walks the same fills as the producer: for the n-th fill of a stage it waits until
  // this CTA's consumers have released the stage's (n-1)-th use, then tells every peer. The
  // first fill's arrival says nothing (the stage is fresh).
  template <int kCluster>
  __device__ __forceinline__ void relay_to_peers(const RingPosition<kStages>& p, uint32_t rank) {
    mbarrier_wait(&empty[p.stage], p.phase ^ 1u);
#pragma unroll
    for (uint32_t peer = 1; peer < kCluster; ++peer)
      mbarrier_arrive_peer(&peers_free[p.stage], (rank + peer) % kCluster);
  }
  // The producer, after producer_acquire, before it multicasts the n-th fill: every peer's n-th
  // arrival, phase n of peers_free -- parity `phase`, not the preceding phase the empty wait
  // takes. A peer cannot send its (n+1)-th before this producer has seen the n-th: that needs
  // the peer's consumers to have read the peer's n-th fill, which includes this producer's
  // multicast, issued only after this wait.
  __device__ __forceinline__ void wait_peers(const RingPosition<kStages>& p) {
    mbarrier_wait(&peers_free[p.stage], p.phase);
  }
  __device__ __forceinline__ void consumer_wait(const RingPosition<kStages>& p) {
    mbarrier_wait(&full[p.stage], p.phase);
  }
  __device__ __forceinline__ void consumer_release(int stage) { mbarrier_arrive(&empty[stage]); }
};

}  // namespace lowbit::hopper
