// Thread-block clusters (sm_90): the single home for cluster rank, cluster-wide barriers and
// shared::cluster addressing (mapa) in lowbit.
#pragma once

#include <cuda/ptx>
#include <cstdint>

namespace lowbit::hopper {

__device__ __forceinline__ uint32_t cluster_ctarank() { return cuda::ptx::get_sreg_cluster_ctarank(); }

// Every thread of every CTA in the cluster arrives, then waits: makes barrier initialization
// visible to peer CTAs before any of them multicasts into or arrives on it.
__device__ __forceinline__ void cluster_sync() {
  cuda::ptx::barrier_cluster_arrive(cuda::ptx::sem_release);
  cuda::ptx::barrier_cluster_wait(cuda::ptx::sem_acquire);
}

// The shared::cluster address of the object at `local` in the CTA of rank `rank`.
__device__ __forceinline__ uint32_t mapa_shared(const void* local, uint32_t rank) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(local));
  uint32_t out;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(out) : "r"(addr), "r"(rank));
  return out;
}

}  // namespace lowbit::hopper
