#include "launch_floor.h"

#include <cuda.h>
#include <cuda_runtime.h>

namespace lowbit::bench {
namespace {

struct alignas(16) ParamBlock {
  unsigned char bytes[512];
};

__global__ void empty_like_gemm(const __grid_constant__ CUtensorMap, const __grid_constant__ CUtensorMap,
                                const __grid_constant__ CUtensorMap, const __grid_constant__ CUtensorMap,
                                const ParamBlock) {}
__global__ void empty_maps_only(const __grid_constant__ CUtensorMap, const __grid_constant__ CUtensorMap,
                                const __grid_constant__ CUtensorMap, const __grid_constant__ CUtensorMap) {}
__global__ void empty_one_pointer(const void*) {}

}  // namespace

cudaError_t launch_empty_like_gemm(cudaStream_t stream) {
  static const CUtensorMap map{};
  static const ParamBlock block{};
  empty_like_gemm<<<132, 384, 0, stream>>>(map, map, map, map, block);
  return cudaGetLastError();
}

cudaError_t launch_empty_maps_only(cudaStream_t stream) {
  static const CUtensorMap map{};
  empty_maps_only<<<132, 384, 0, stream>>>(map, map, map, map);
  return cudaGetLastError();
}

cudaError_t launch_empty_one_pointer(cudaStream_t stream) {
  empty_one_pointer<<<132, 384, 0, stream>>>(nullptr);
  return cudaGetLastError();
}

// The same two kernels launched through the driver (cuLaunchKernel on the CUfunction the runtime
// registered), without the runtime's launch path. The entry point comes from the runtime, as
// hopper/tensor_map.cpp gets cuTensorMapEncodeTiled, so nothing links libcuda.
namespace {
using LaunchFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void**, void**);
LaunchFn driver_launch() {
  static const LaunchFn fn = [] {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult q;
    return cudaGetDriverEntryPointByVersion("cuLaunchKernel", &ptr, 12000, cudaEnableDefault, &q) == cudaSuccess &&
                   q == cudaDriverEntryPointSuccess
               ? reinterpret_cast<LaunchFn>(ptr)
               : nullptr;
  }();
  return fn;
}

// The CUfunction the runtime registered for `kernel`, and one launch of it on the floor's grid.
CUfunction registered(const void* kernel) {
  cudaFunction_t f = nullptr;
  return cudaGetFuncBySymbol(&f, kernel) == cudaSuccess ? reinterpret_cast<CUfunction>(f) : nullptr;
}
cudaError_t launch_through_driver(CUfunction f, void** args, cudaStream_t stream) {
  const LaunchFn launch = driver_launch();
  if (f == nullptr || launch == nullptr) return cudaErrorInvalidDeviceFunction;
  return launch(f, 132, 1, 1, 384, 1, 1, 0, stream, args, nullptr) == CUDA_SUCCESS ? cudaSuccess
                                                                                     : cudaErrorLaunchFailure;
}
}  // namespace

cudaError_t launch_empty_like_gemm_driver(cudaStream_t stream) {
  static const CUtensorMap map{};
  static const ParamBlock block{};
  static const CUfunction f = registered(reinterpret_cast<const void*>(empty_like_gemm));
  void* args[] = {const_cast<CUtensorMap*>(&map), const_cast<CUtensorMap*>(&map), const_cast<CUtensorMap*>(&map),
                  const_cast<CUtensorMap*>(&map), const_cast<ParamBlock*>(&block)};
  return launch_through_driver(f, args, stream);
}

cudaError_t launch_empty_one_pointer_driver(cudaStream_t stream) {
  static const CUfunction f = registered(reinterpret_cast<const void*>(empty_one_pointer));
  const void* p = nullptr;
  void* args[] = {&p};
  return launch_through_driver(f, args, stream);
}

}  // namespace lowbit::bench
