// The one place lowbit launches a kernel: the driver's cuLaunchKernelEx on the kernel's function in
// the current context (cached per thread, kernel and context), with the cluster and PDL
// attributes. The runtime's cudaLaunchKernelEx took 0.3-0.55 us more host time for the same launch
// on the H100's host (docs/perf.md, P1 "The launch through the driver"), which an eager caller pays
// on every GEMM.
#pragma once

#include <cuda_runtime.h>

#include <utility>

namespace lowbit::hopper {

struct LaunchShape {
  dim3 grid;
  dim3 block;
  size_t smem_bytes = 0;
  unsigned cluster = 1;  // CTAs per cluster along x; 1: no cluster attribute
  bool pdl = false;      // programmatic stream serialization (hopper/grid_dependency.cuh)
};

// Launches `kernel` (a __global__ function's address) with one pointer per parameter in `params`.
// The error is the driver's CUresult read as the cudaError_t of the same number (the two
// enumerations share their numbers; a bad launch configuration reads as cudaErrorInvalidValue where
// the runtime said cudaErrorInvalidConfiguration), or cudaErrorInvalidResourceHandle for a stream
// of another context than the current one, which the runtime refused too. Nothing is left in the
// runtime's last error.
cudaError_t launch_params(const void* kernel, const LaunchShape& shape, cudaStream_t stream, void** params);

// Launches kernel(args...) on `stream`: each argument converted to its parameter's type, as
// <<<>>> does.
template <class... KernelArgs, class... Args>
cudaError_t launch(void (*kernel)(KernelArgs...), const LaunchShape& shape, cudaStream_t stream, Args&&... args) {
  return [&](KernelArgs... converted) {
    void* params[sizeof...(KernelArgs) + 1] = {const_cast<void*>(static_cast<const void*>(&converted))...};
    return launch_params(reinterpret_cast<const void*>(kernel), shape, stream, params);
  }(std::forward<Args>(args)...);
}

}  // namespace lowbit::hopper
