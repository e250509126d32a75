// Thread-block clusters (sm_90): the single home for cluster ranks, the cluster-wide barrier and
// addressing a peer CTA's shared memory. Kernels that multicast TMA loads to a peer use these to
// hand stages back across the cluster (StageBarriers::relay_to_peers, wait_peers).
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

// The same without ordering memory: where every access across the cluster is ordered by
// mbarriers of its own (and mbarrier inits by mbarrier_init_fence before it). The release form
// makes every thread run a GPU-scope MEMBAR, here at kernel start and exit.
__device__ __forceinline__ void cluster_sync_relaxed() {
  cuda::ptx::barrier_cluster_arrive(cuda::ptx::sem_relaxed);
  cuda::ptx::barrier_cluster_wait();
}

// The same shared-memory object in CTA `rank` of this cluster (a generic address into its
// distributed shared memory).
template <class T>
__device__ __forceinline__ T* peer_shared(T* local, uint32_t rank) {
  return static_cast<T*>(__cluster_map_shared_rank(static_cast<void*>(local), rank));
}

// Arrives on an mbarrier in a peer CTA's shared memory, relaxed. The stage it hands back was read
// only by wgmma instructions (the peer multicasts B, never the operands read by ordinary loads),
// retired by wgmma.wait_group before the local release the relay waited for; CUTLASS's cluster
// pipelines hand stages back the same way (a remote arrive with CTA-scope release). The
// cluster-scope release form compiles to a GPU-wide MEMBAR per arrival: even on the relay
// thread alone it made the pairs 12-46% slower (docs/perf.md W1 v9).
// Only the relay thread arrives remotely (StageBarriers::relay_to_peers), off the consumers' and
// the producer's path. From the consumers (each warp, after each retired stage) the remote
// arrivals cost ~9% even with no loads at all, and from the producer thread they delayed its
// loads (docs/perf.md W1 v9).
__device__ __forceinline__ void mbarrier_arrive_peer(uint64_t* local_bar, uint32_t rank) {
  cuda::ptx::mbarrier_arrive(cuda::ptx::sem_relaxed, cuda::ptx::scope_cluster, cuda::ptx::space_cluster,
                             peer_shared(local_bar, rank));
}

// Stores 16 bytes into CTA `rank`'s copy of `local` (st.async) and counts them on its copy of
// `local_bar` (complete_tx, which releases them at cluster scope): the receiver learns the data
// landed from its own barrier, with no fence in either CTA's path. The source registers are read
// at issue.
__device__ __forceinline__ void st_async_peer(float4* local, const float4& v, uint64_t* local_bar, uint32_t rank) {
  const float vals[4] = {v.x, v.y, v.z, v.w};
  cuda::ptx::st_async(reinterpret_cast<float*>(peer_shared(local, rank)), vals, peer_shared(local_bar, rank));
}

}  // namespace lowbit::hopper
