// The compiled NVFP4 GEMM kernel variants (one per token tile), as data: the chooser picks among
// them, the bench can force any, and launch.cu instantiates exactly this list, each dense and
// grouped.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include "gemm/nvfp4/traits.cuh"

namespace lowbit::nvfp4 {

using Nvfp4LaunchFn = cudaError_t (*)(int grid, cudaStream_t, const CUtensorMap& act, const Nvfp4KernelParams&);

struct Nvfp4Variant {
  int tokens;
  int stages;
  int smem;
  Nvfp4LaunchFn launch_dense;
  Nvfp4LaunchFn launch_grouped;  // tm_act unused: the groups' maps live in the workspace
  const char* note;
};

// nullptr when no variant has this token tile.
const Nvfp4Variant* find_nvfp4_variant(int tokens);

}  // namespace lowbit::nvfp4
