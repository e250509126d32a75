// The compiled NVFP4 GEMM kernel variants (one per token tile, gemm/nvfp4/variants.def) as the
// launchers use them: the chooser picks among them and the bench can force any.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <string>

namespace lowbit::nvfp4 {

struct Nvfp4KernelParams;  // gemm/nvfp4/traits.cuh
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
// The compiled token tiles ("16, 32, 64, 128 or 256"; grouped: those with a grouped kernel), for
// error messages.
std::string nvfp4_tile_list(bool grouped = false);

}  // namespace lowbit::nvfp4
