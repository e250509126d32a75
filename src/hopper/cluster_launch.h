// Host side of thread-block clusters: launching a persistent grid in clusters of CTAs along x,
// and how many CTAs of a kernel the device holds at once in such clusters (GPCs need not divide
// evenly into clusters, so this is asked of the runtime, once per device and kernel).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>
#include <utility>

#include "common/context.h"
#include "hopper/grid_dependency.cuh"

namespace lowbit::hopper {

// `attr` holds the cluster shape and must outlive the returned config's use.
inline cudaLaunchConfig_t cluster_launch_config(int ctas, int threads, int smem_bytes, int cluster,
                                                cudaStream_t stream, cudaLaunchAttribute* attr) {
  *attr = cudaLaunchAttribute{};
  attr->id = cudaLaunchAttributeClusterDimension;
  attr->val.clusterDim.x = static_cast<unsigned>(cluster);
  attr->val.clusterDim.y = 1;
  attr->val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(ctas));
  cfg.blockDim = dim3(static_cast<unsigned>(threads));
  cfg.dynamicSmemBytes = static_cast<size_t>(smem_bytes);
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cfg;
}

// Opts kKernel into `smem_bytes` of dynamic shared memory in the current context. The attribute
// belongs to the context, so it is remembered per device together with the context it was set
// in: a second GPU, or the fresh context after cudaDeviceReset, gets it set again.
// Each thread also remembers the last context it found the attribute set in, so an eager call
// pays neither the lock nor cudaGetDevice (context ids are never reused in a process).
template <auto kKernel>
cudaError_t opt_in_dynamic_smem(int smem_bytes) {
  thread_local uint64_t seen_in = 0;
  const uint64_t ctx = current_context_id();
  if (ctx != 0 && seen_in == ctx) return cudaSuccess;
  static std::mutex mu;
  static uint64_t done_in[64] = {};  // context id in which the attribute was set, per device
  int device = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e != cudaSuccess) return e;
  std::lock_guard<std::mutex> lock(mu);
  const bool cached = device >= 0 && device < 64 && ctx != 0;
  if (cached && done_in[device] == ctx) {
    seen_in = ctx;
    return cudaSuccess;
  }
  e = cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
  if (e != cudaSuccess) return e;
  // Setting it creates the context if none was current: remember the one it landed in.
  const uint64_t now = current_context_id();
  if (device >= 0 && device < 64 && now != 0) done_in[device] = now;
  seen_in = now;
  return e;
}

// Sets the kernel's dynamic shared-memory opt-in and answers how many of its CTAs are resident
// at once: the SM count for single CTAs, clusters x cluster size otherwise. Cached per device
// and kernel (the kernel is a template argument so each one has its own cache).
template <auto kKernel>
cudaError_t prepare_persistent(int threads, int smem_bytes, int cluster, int device, int* max_ctas) {
  constexpr auto kernel = kKernel;
  static std::mutex mu;
  // Per device and cluster size (a kernel that splits K within a cluster launches clusters of its
  // split count, 2 to 8; a portable cluster holds at most 8 CTAs).
  static int cached[64][9] = {};
  if (cluster < 1 || cluster > 8) return cudaErrorInvalidConfiguration;
  // The opt-in first, every call (it is per context and caches itself); the resident count is a
  // property of the device and kernel.
  cudaError_t e = opt_in_dynamic_smem<kKernel>(smem_bytes);
  if (e != cudaSuccess) return e;
  // The thread's last answer per cluster size, read without the lock.
  struct Seen {
    int device = -1;
    int ctas = 0;
  };
  thread_local Seen seen[9];
  if (seen[cluster].device == device && seen[cluster].ctas > 0) {
    *max_ctas = seen[cluster].ctas;
    return cudaSuccess;
  }
  std::lock_guard<std::mutex> lock(mu);
  if (device >= 0 && device < 64 && cached[device][cluster] > 0) {
    *max_ctas = cached[device][cluster];
    seen[cluster] = Seen{device, *max_ctas};
    return cudaSuccess;
  }
  int ctas = 0;
  if (cluster > 1) {
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = cluster_launch_config(cluster * 1024, threads, smem_bytes, cluster, nullptr, &attr);
    int clusters = 0;
    e = cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg);
    if (e != cudaSuccess) return e;
    ctas = clusters * cluster;
  } else {
    e = cudaDeviceGetAttribute(&ctas, cudaDevAttrMultiProcessorCount, device);
    if (e != cudaSuccess) return e;
  }
  if (ctas <= 0) return cudaErrorInvalidConfiguration;
  if (device >= 0 && device < 64) cached[device][cluster] = ctas;
  seen[cluster] = Seen{device, ctas};
  *max_ctas = ctas;
  return cudaSuccess;
}

// CTAs of a persistent grid: `grid` <= 0 asks for all resident ones, a forced grid is capped at
// them unless `oversubscribe` (only single CTAs may wait for a second wave: cluster peers must
// co-run); at most one cluster per unit when `max_units` > 0; whole clusters, at least one.
inline int persistent_grid(int grid, int max_ctas, int max_units, int cluster, bool oversubscribe) {
  int ctas = grid <= 0 ? max_ctas : oversubscribe ? grid : (grid < max_ctas ? grid : max_ctas);
  if (max_units > 0 && ctas > max_units * cluster) ctas = max_units * cluster;
  ctas = ctas / cluster * cluster;
  return ctas < cluster ? cluster : ctas;
}

template <class... KernelArgs, class... Args>
cudaError_t launch_clustered(void (*kernel)(KernelArgs...), int ctas, int threads, int smem_bytes, int cluster,
                             cudaStream_t stream, Args&&... args) {
  LaunchShape shape;
  shape.grid = dim3(static_cast<unsigned>(ctas));
  shape.block = dim3(static_cast<unsigned>(threads));
  shape.smem_bytes = static_cast<size_t>(smem_bytes);
  shape.cluster = static_cast<unsigned>(cluster);
  return launch(kernel, shape, stream, std::forward<Args>(args)...);
}

// Launches kKernel as a persistent grid (see persistent_grid) on `stream`; *launched gets the CTA
// count.
template <auto kKernel, class... Args>
cudaError_t launch_persistent(int grid, int max_units, int threads, int smem_bytes, int cluster, int device,
                              cudaStream_t stream, int* launched, Args&&... args) {
  int max_ctas = 0;
  const cudaError_t e = prepare_persistent<kKernel>(threads, smem_bytes, cluster, device, &max_ctas);
  if (e != cudaSuccess) return e;
  const int ctas = persistent_grid(grid, max_ctas, max_units, cluster, /*oversubscribe=*/cluster == 1);
  *launched = ctas;
  // The launch's own error, never an earlier one of the caller's left in cudaGetLastError.
  if (cluster == 1)
    return launch_kernel(kKernel, dim3(ctas), dim3(threads), smem_bytes, stream, /*pdl=*/false,
                         std::forward<Args>(args)...);
  return launch_clustered(kKernel, ctas, threads, smem_bytes, cluster, stream, std::forward<Args>(args)...);
}

}  // namespace lowbit::hopper
