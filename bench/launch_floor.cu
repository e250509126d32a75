#include "launch_floor.h"

#include <cuda.h>
#include <cuda_runtime.h>

#include "common/driver_entry.h"
#include "hopper/launch.h"

namespace lowbit::bench {
namespace {

struct alignas(16) ParamBlock {
  unsigned char bytes[512];
};

__global__ void empty_like_gemm(const __grid_constant__ CUtensorMap, const __grid_constant__ CUtensorMap,
                                const __grid_constant__ CUtensorMap, const __grid_constant__ CUtensorMap,
                                const ParamBlock) {}
__global__ void empty_one_pointer(const void*) {}

// Every floor launch has the GEMM's grid (one CTA per H100 SM, three warpgroups) and empty
// parameters of the GEMM's sizes.
constexpr unsigned kGrid = 132, kThreads = 384;
const CUtensorMap kMap{};
const ParamBlock kBlock{};

// The driver's cuLaunchKernel (common/driver_entry.h: nothing links libcuda).
using LaunchFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void**, void**);
LaunchFn driver_launch() {
  static const LaunchFn fn = driver_entry<LaunchFn>("cuLaunchKernel", 12000);
  return fn;
}

// The CUfunction the runtime registered for `kernel`.
CUfunction registered(const void* kernel) {
  cudaFunction_t f = nullptr;
  return cudaGetFuncBySymbol(&f, kernel) == cudaSuccess ? reinterpret_cast<CUfunction>(f) : nullptr;
}

// One launch of `f` through the driver, bypassing the runtime's launch path.
cudaError_t launch_through_driver(CUfunction f, void** args, cudaStream_t stream) {
  const LaunchFn launch = driver_launch();
  if (f == nullptr || launch == nullptr) return cudaErrorInvalidDeviceFunction;
  return launch(f, kGrid, 1, 1, kThreads, 1, 1, 0, stream, args, nullptr) == CUDA_SUCCESS ? cudaSuccess
                                                                                           : cudaErrorLaunchFailure;
}

}  // namespace

cudaError_t launch_empty_like_gemm(cudaStream_t stream) {
  empty_like_gemm<<<kGrid, kThreads, 0, stream>>>(kMap, kMap, kMap, kMap, kBlock);
  return cudaGetLastError();
}

cudaError_t launch_empty_like_gemm_lowbit(cudaStream_t stream) {
  hopper::LaunchShape shape;
  shape.grid = dim3(kGrid);
  shape.block = dim3(kThreads);
  return hopper::launch(empty_like_gemm, shape, stream, kMap, kMap, kMap, kMap, kBlock);
}

cudaError_t launch_empty_like_gemm_driver(cudaStream_t stream) {
  static const CUfunction f = registered(reinterpret_cast<const void*>(empty_like_gemm));
  void* map = const_cast<CUtensorMap*>(&kMap);
  void* args[] = {map, map, map, map, const_cast<ParamBlock*>(&kBlock)};
  return launch_through_driver(f, args, stream);
}

cudaError_t launch_empty_one_pointer_driver(cudaStream_t stream) {
  static const CUfunction f = registered(reinterpret_cast<const void*>(empty_one_pointer));
  const void* p = nullptr;
  void* args[] = {&p};
  return launch_through_driver(f, args, stream);
}

}  // namespace lowbit::bench
