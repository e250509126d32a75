// The compiled swap-AB expert GEMM token tiles as data (moe/variants.def), for the host: the
// launcher finds a tile's kernel here, and a config names a compiled tile only if it is a line of
// the same table.
#pragma once

namespace lowbit::moe {

struct MoeVariantSpec {
  int token_tile;
  const char* reason;
};

inline constexpr MoeVariantSpec kMoeVariantSpecs[] = {
#define LOWBIT_MOE_VARIANT(token_tile, reason) {token_tile, reason},
#include "moe/variants.def"
#undef LOWBIT_MOE_VARIANT
};
inline constexpr int kNumMoeVariantSpecs = sizeof(kMoeVariantSpecs) / sizeof(kMoeVariantSpecs[0]);

// The chooser takes the first tile that holds the average tokens per expert.
constexpr bool moe_tiles_ascend() {
  for (int i = 1; i < kNumMoeVariantSpecs; ++i)
    if (kMoeVariantSpecs[i].token_tile <= kMoeVariantSpecs[i - 1].token_tile) return false;
  return true;
}
static_assert(moe_tiles_ascend(), "moe/variants.def lists its token tiles in ascending order");

}  // namespace lowbit::moe
