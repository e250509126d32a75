// Compile-time shape of the MoE expert GEMM. Swap-AB: the expert's weights are the WGMMA's M
// side (128 rows of W_e, two consumer warpgroups x 64) and the tokens its N side (a token tile
// of 16..128), because an expert sees few tokens (4 on average at the seed's shape) and an
// M = 128 token tile would spend most of the tensor cores on padding. One W scale (128 x 128)
// covers the tile per K block; each stage carries the token tile's per-row X scales.
#pragma once

#include <cstdint>

#include "gemm/core/traits.cuh"
#include "hopper/mbarrier.cuh"
#include "moe/workspace.h"

namespace lowbit::moe {

// Staged output tile: one row per token of the tile, 128 weight columns + 4 floats of padding
// so the accumulator scatter into it is bank-conflict free (8 lanes' rows x 4 lanes' columns
// land in 32 distinct banks).
constexpr int kOutPitch = 128 + 4;

// Many tokens per expert run the other orientation, tokens as the MMA's rows, on the block-scaled
// core (moe/launch.cu, run_core_gemm).
template <int kTokenTile_, int kStages_>
struct ExpertGemmTraits : gemm::RegisterSplit {
  static constexpr int kBlockM = 128;  // weight rows, two consumer warpgroups x 64
  static constexpr int kBlockN = kTokenTile_;  // tokens
  static constexpr int kTokens = kTokenTile_;
  static constexpr int kScaleBlocksN = 1;      // one W scale per tile and K block
  static constexpr bool kStagedBScales = false;  // fetched by the consumers from L2, a block ahead
  static constexpr int kBlockK = 128;  // = the scale block along K, one 128-byte swizzle row
  static constexpr int kStages = kStages_;
  static constexpr int kConsumerWarpgroups = 2;
  static constexpr int kThreads = 128 * (1 + kConsumerWarpgroups);
  static constexpr int kClusterM = 1;
  static constexpr int kSmemA = kBlockM * kBlockK;
  static constexpr int kSmemB = kBlockN * kBlockK;
  // Partials of N / 2 registers: two of them + the FP32 accumulator fit for every token tile.
  static constexpr bool kDoubleBuffer = true;

  struct alignas(1024) SharedStorage {
    uint8_t a[kStages][kSmemA];  // 1024-byte aligned: the 128B swizzle atom
    uint8_t b[kStages][kSmemB];
    alignas(16) float sfa[kStages][kTokens];  // the stage's X scales, one per token row
    alignas(16) float out[kTokens][kOutPitch];  // token-major: one row per token, 128 weight columns
    // The layout's expert table, read once per CTA: units resolve without global round trips.
    int tile_start[kMaxExperts + 1];
    int counts[kMaxExperts];
    int offsets[kMaxExperts];
    hopper::StageBarriers<kStages> bars;
  };
  static constexpr int kSmemBytes = static_cast<int>(sizeof(SharedStorage)) + 1024;  // + alignment slack
};

// As many stages as fit next to the output tile and the expert table, at most 8 (enough bytes
// in flight to keep one SM's share of HBM bandwidth busy).
constexpr int expert_gemm_stages(int token_tile) {
  const int fixed = token_tile * kOutPitch * 4 + 4 * (3 * kMaxExperts + 1) + 2048;
  const int stages = (gemm::kSm90MaxSmemPerBlock - fixed) / (128 * 128 + token_tile * 128 + token_tile * 4 + 16);
  return stages < 8 ? stages : 8;
}

}  // namespace lowbit::moe
