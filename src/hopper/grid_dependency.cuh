// Programmatic dependent launch (PDL, griddepcontrol): a kernel launched with the
// programmatic-stream-serialization attribute may become resident while the kernel before it in
// the stream still runs, once every block of that kernel has called launch_dependents() (or
// exited). Its launch latency and prologue then hide under the predecessor's tail.
//
// The contract, for every kernel launched this way: nothing the predecessor writes, and nothing
// the predecessor reads that this kernel writes, is touched before grid_dependency_wait(), which
// returns once the predecessor grid has completed and its memory is visible. Without the
// attribute the wait returns at once, so kernels call it unconditionally.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "hopper/launch.h"

namespace lowbit::hopper {

__device__ __forceinline__ void grid_dependency_wait() { cudaGridDependencySynchronize(); }

// Lets the next kernel in the stream launch (it still waits for this grid's completion before
// reading what this grid writes). Safe to call at any point, any number of times.
__device__ __forceinline__ void launch_dependents() { cudaTriggerProgrammaticLaunchCompletion(); }

// Launches `kernel` on `stream`, with PDL when `pdl` is set. A kernel that keeps the contract
// above may be the first of a pipeline and still launch with it: its wait orders it after the
// caller's last kernel, and every later stage waits on the one before.
template <class... KernelArgs, class... Args>
cudaError_t launch_kernel(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem_bytes,
                          cudaStream_t stream, bool pdl, Args&&... args) {
  LaunchShape shape;
  shape.grid = grid;
  shape.block = block;
  shape.smem_bytes = smem_bytes;
  shape.pdl = pdl;
  return launch(kernel, shape, stream, std::forward<Args>(args)...);
}

}  // namespace lowbit::hopper
