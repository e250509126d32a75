// The compiled NVFP4 GEMM token tiles as data (gemm/nvfp4/variants.def), for the host: the
// launchers find a tile's kernels here (find_nvfp4_variant), and a config names a compiled tile
// only if it is a line of the same table.
#pragma once

#include "gemm/token_tiles.h"

namespace lowbit::nvfp4 {

inline constexpr gemm::TokenTileSpec kNvfp4VariantSpecs[] = {
#define LOWBIT_NVFP4_VARIANT(tokens, reason) {tokens, reason},
#include "gemm/nvfp4/variants.def"
#undef LOWBIT_NVFP4_VARIANT
};
inline constexpr int kNumNvfp4VariantSpecs = sizeof(kNvfp4VariantSpecs) / sizeof(kNvfp4VariantSpecs[0]);

}  // namespace lowbit::nvfp4
