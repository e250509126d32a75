#include "hopper/launch.h"

#include <cuda.h>
#include <cudaTypedefs.h>

#include <cstdint>

#include "common/driver_entry.h"

namespace lowbit::hopper {
namespace {

PFN_cuLaunchKernelEx_v11060 driver_launch() {
  static const auto fn = driver_entry<PFN_cuLaunchKernelEx_v11060>("cuLaunchKernelEx", 11060);
  return fn;
}

// The kernel handle of a __global__ function's address. The handle is the same in every context,
// so each thread keeps the ones it asked for, direct-mapped by address (a colliding kernel
// replaces the older entry and is asked for again).
struct HandleEntry {
  const void* kernel;
  cudaKernel_t handle;
};
HandleEntry& handle_entry(const void* kernel) {
  static constexpr int kSlots = 256;
  thread_local HandleEntry cache[kSlots] = {};
  return cache[(reinterpret_cast<uintptr_t>(kernel) >> 4) % kSlots];
}
cudaError_t kernel_handle(const void* kernel, cudaKernel_t* out) {
  HandleEntry& e = handle_entry(kernel);
  if (e.kernel == kernel) {
    *out = e.handle;
    return cudaSuccess;
  }
  cudaKernel_t k = nullptr;
  const cudaError_t err = cudaGetKernel(&k, kernel);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return err;
  }
  e = HandleEntry{kernel, k};
  *out = k;
  return cudaSuccess;
}

}  // namespace

cudaError_t launch_params(const void* kernel, const LaunchShape& shape, cudaStream_t stream, void** params) {
  const PFN_cuLaunchKernelEx_v11060 launch = driver_launch();
  if (launch == nullptr) return cudaErrorNotSupported;
  cudaKernel_t k = nullptr;
  cudaError_t e = kernel_handle(kernel, &k);
  if (e != cudaSuccess) return e;
  CUlaunchAttribute attrs[2];
  unsigned n = 0;
  if (shape.cluster > 1) {
    attrs[n] = CUlaunchAttribute{};
    attrs[n].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attrs[n].value.clusterDim.x = shape.cluster;
    attrs[n].value.clusterDim.y = 1;
    attrs[n].value.clusterDim.z = 1;
    ++n;
  }
  if (shape.pdl) {
    attrs[n] = CUlaunchAttribute{};
    attrs[n].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attrs[n].value.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  CUlaunchConfig config{};
  config.gridDimX = shape.grid.x;
  config.gridDimY = shape.grid.y;
  config.gridDimZ = shape.grid.z;
  config.blockDimX = shape.block.x;
  config.blockDimY = shape.block.y;
  config.blockDimZ = shape.block.z;
  config.sharedMemBytes = static_cast<unsigned>(shape.smem_bytes);
  config.hStream = reinterpret_cast<CUstream>(stream);
  config.attrs = n > 0 ? attrs : nullptr;
  config.numAttrs = n;
  // A kernel handle launches in the calling thread's current context (ArgCheck::device made one
  // current).
  CUresult r = launch(&config, reinterpret_cast<CUfunction>(k), params, nullptr);
  if (r == CUDA_ERROR_INVALID_HANDLE) {
    // A handle the runtime no longer knows (its modules were loaded again): ask once more.
    handle_entry(kernel) = HandleEntry{};
    e = kernel_handle(kernel, &k);
    if (e != cudaSuccess) return e;
    r = launch(&config, reinterpret_cast<CUfunction>(k), params, nullptr);
  }
  return static_cast<cudaError_t>(r);
}

}  // namespace lowbit::hopper
