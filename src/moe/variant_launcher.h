// One compiled swap-AB expert GEMM kernel behind plain function pointers, as the launcher sees it
// (defined per variants.def line by moe/variant_launch.cuh, tabled in the generated
// moe_variants_gen.h).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include "moe/workspace.h"

namespace lowbit::moe {

struct VariantLauncher {
  // `ctas` CTAs (persistent over the units), with PDL when `pdl`.
  cudaError_t (*launch)(int ctas, cudaStream_t, bool pdl, const CUtensorMap& w, const CUtensorMap& x,
                        const MoeParams& p);
  cudaError_t (*opt_in)();  // the kernel's dynamic shared memory, before a call's first launch
  int smem_bytes;
};

}  // namespace lowbit::moe
