// Thread-block clusters (sm_90): the single home for cluster ranks, the cluster-wide barrier and
// addressing a peer CTA's shared memory. Kernels that multicast TMA loads to a peer use these to
// hand stages back across the cluster (see StageBarriers::consumer_release_cluster).
#pragma once

#include <cuda/ptx>
#include <cstdint>

namespace lowbit::hopper {

__device__ __forceinline__ uint32_t cluster_rank() { return cuda::ptx::get_sreg_cluster_ctarank(); }

// All threads of every CTA in the cluster. Before a peer's first remote access (its barriers
// must be initialized) and before exit (no peer may still write into this CTA's shared memory).
__device__ __forceinline__ void cluster_sync() {
  cuda::ptx::barrier_cluster_arrive(cuda::ptx::sem_release);
  cuda::ptx::barrier_cluster_wait(cuda::ptx::sem_acquire);
}

// The same shared-memory object in CTA `rank` of this cluster (a generic address into its
// distributed shared memory).
template <class T>
__device__ __forceinline__ T* peer_shared(T* local, uint32_t rank) {
  return static_cast<T*>(__cluster_map_shared_rank(static_cast<void*>(local), rank));
}

// Arrives on an mbarrier in a peer CTA's shared memory, relaxed: it orders none of this thread's
// earlier memory accesses. Enough for handing back a stage whose only readers were this
// warpgroup's wgmma instructions, already retired by wgmma.wait_group; the release form compiles
// to a GPU-wide MEMBAR per arrival.
__device__ __forceinline__ void mbarrier_arrive_peer_relaxed(uint64_t* local_bar, uint32_t rank) {
  cuda::ptx::mbarrier_arrive(cuda::ptx::sem_relaxed, cuda::ptx::scope_cluster, cuda::ptx::space_cluster,
                             peer_shared(local_bar, rank));
}

}  // namespace lowbit::hopper
