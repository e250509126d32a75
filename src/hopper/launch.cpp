#include "hopper/launch.h"

#include <cuda.h>
#include <cudaTypedefs.h>

#include <climits>
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

// A kernel handle launches in its stream's context, not the calling thread's (cuLaunchKernelEx):
// a stream of another context -- another device's -- would run the kernel there, on arguments
// checked, sized and mapped for this one. The runtime's launch refused such a stream, and so does
// this. The null, legacy and per-thread streams are the current context's. A green context's
// streams count as its device's primary context, whose memory they share (cuStreamGetCtx_v2).
// Where the driver cannot tell (no current context, an older driver), the launch goes ahead as
// the runtime's would.
bool stream_of_another_context(cudaStream_t stream) {
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread) return false;
  static const auto contexts = driver_entry<PFN_cuStreamGetCtx_v12050>("cuStreamGetCtx", 12050);
  if (contexts == nullptr) return false;
  CUcontext of_stream = nullptr, current = nullptr;
  CUgreenCtx green = nullptr;
  if (contexts(reinterpret_cast<CUstream>(stream), &of_stream, &green) != CUDA_SUCCESS) return false;
  if (contexts(nullptr, &current, &green) != CUDA_SUCCESS || current == nullptr) return false;
  return of_stream != current;
}

}  // namespace

cudaError_t launch_params(const void* kernel, const LaunchShape& shape, cudaStream_t stream, void** params) {
  const PFN_cuLaunchKernelEx_v11060 launch = driver_launch();
  if (launch == nullptr) return cudaErrorNotSupported;
  if (shape.smem_bytes > UINT_MAX) return cudaErrorInvalidValue;
  if (stream_of_another_context(stream)) return cudaErrorInvalidResourceHandle;
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
  // With the null stream, in the calling thread's current context (ArgCheck::device made one
  // current); otherwise in the stream's, which is the same one (stream_of_another_context).
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
