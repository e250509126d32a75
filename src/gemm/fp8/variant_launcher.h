// A compiled FP8 GEMM kernel behind a plain function pointer, as the launcher sees it (defined
// per variants.def line by gemm/fp8/variant_launch.cuh, tabled in the generated fp8_variants_gen.h).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include "gemm/core/traits.cuh"

namespace lowbit::fp8 {

// `grid` <= 0: as many CTAs as are resident at once (rounded to whole clusters); `max_units` caps
// it at one CTA per unit.
// The maps: A, B, D, the fourth (a family's auxiliary map: gemm::gemm_kernel), A's last tile row.
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

}  // namespace lowbit::fp8
