// The compiled swap-AB expert GEMM token tiles as data (moe/variants.def), for the host: the
// launcher finds a tile's kernel here, and a config names a compiled tile only if it is a line of
// the same table.
#pragma once

#include "gemm/token_tiles.h"

namespace lowbit::moe {

inline constexpr gemm::TokenTileSpec kMoeVariantSpecs[] = {
#define LOWBIT_MOE_VARIANT(token_tile, reason) {token_tile, reason},
#include "moe/variants.def"
#undef LOWBIT_MOE_VARIANT
};
inline constexpr int kNumMoeVariantSpecs = sizeof(kMoeVariantSpecs) / sizeof(kMoeVariantSpecs[0]);

// The chooser takes the first tile that holds the average tokens per expert.
static_assert(gemm::token_tiles_ascend(kMoeVariantSpecs), "moe/variants.def lists its token tiles in ascending order");

}  // namespace lowbit::moe
