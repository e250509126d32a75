// One compiled NVFP4 token tile's kernels behind plain function pointers, as the launchers see
// them (defined per variants.def line by gemm/nvfp4/variant_launch.cuh, tabled in the generated
// nvfp4_variants_gen.h).
#pragma once

#include "gemm/nvfp4/variants.h"

namespace lowbit::nvfp4 {

struct VariantLauncher {
  Nvfp4LaunchFn dense;
  Nvfp4LaunchFn grouped;  // null: the tile's output is staged in the ring, one unit per CTA
  int stages;
  int smem_bytes;
};

}  // namespace lowbit::nvfp4
