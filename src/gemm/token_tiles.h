// A family whose compiled kernels differ by their token tile alone (the NVFP4 GEMM, the MoE
// swap-AB expert GEMM): a line of its variants.def, and the tile lists its messages give.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace lowbit::gemm {

struct TokenTileSpec {
  int tokens;
  const char* reason;
};

// The tiles of `specs` that `keep` accepts, as a message lists them: "16, 32, 64 or 128".
template <std::size_t N, class Keep>
std::string token_tile_list(const TokenTileSpec (&specs)[N], Keep keep) {
  std::vector<int> tiles;
  for (const TokenTileSpec& s : specs)
    if (keep(s.tokens)) tiles.push_back(s.tokens);
  std::string list;
  for (std::size_t i = 0; i < tiles.size(); ++i)
    list += (i == 0 ? "" : i + 1 == tiles.size() ? " or " : ", ") + std::to_string(tiles[i]);
  return list;
}

// Whether `specs` lists its tiles in ascending order.
template <std::size_t N>
constexpr bool token_tiles_ascend(const TokenTileSpec (&specs)[N]) {
  for (std::size_t i = 1; i < N; ++i)
    if (specs[i].tokens <= specs[i - 1].tokens) return false;
  return true;
}

}  // namespace lowbit::gemm
