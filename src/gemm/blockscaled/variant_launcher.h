// A compiled block-scaled dense kernel behind a plain function pointer (defined per variants.def
// line by gemm/blockscaled/variant_launch.cuh, tabled in the generated blockscaled_variants_gen.h).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include "gemm/core/traits.cuh"

namespace lowbit::blockscaled {

// The maps: A, B, D, the A scales' (CoreTraits::kAScaleGroup > 1; otherwise D stands in), A's last
// tile row (gemm::gemm_kernel; A's own where there is no tail).
using VariantLaunchFn = cudaError_t (*)(int grid, int max_units, cudaStream_t, const CUtensorMap&, const CUtensorMap&,
                                        const CUtensorMap&, const CUtensorMap&, const CUtensorMap&,
                                        const gemm::KernelParams&, int device, int* launched);
// CTAs of the kernel resident at once in clusters of `cluster` (hopper::prepare_persistent).
using VariantResidentFn = cudaError_t (*)(int cluster, int device, int* ctas);
struct VariantLauncher {
  VariantLaunchFn launch;
  int smem_bytes;
  VariantResidentFn resident;
};

}  // namespace lowbit::blockscaled
