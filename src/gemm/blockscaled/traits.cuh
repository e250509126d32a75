// Compile-time shape of the block-scaled FP8 GEMM (dense and grouped) and its shared memory.
// Block scaling (the DeepSeek-V3 recipe): A carries one FP32 scale per row per 128-wide K block
// ("1x128"), B one per 128 x 128 block. The tile is 128 x 128 so that one B scale covers the
// whole tile per K block and each stage carries the 128 A scales of its K block.
#pragma once

#include <cstdint>

#include "gemm/fp8/traits.cuh"
#include "gemm/tile_scheduler.cuh"
#include "hopper/mbarrier.cuh"

namespace lowbit::blockscaled {

// Groups whose tile offsets are copied to shared memory for the per-unit group lookup; beyond
// this the lookup reads the offsets from global memory (L2).
constexpr int kSmemGroupTable = 1024;

// kClusterM_: CTAs per cluster along M. With 2, the CTA pair computes vertically adjacent tiles
// of the same B tile and each multicasts half of it (docs/perf.md: the 128 x 128 tile without
// multicast was L2-bound, 4.7 GB through L2 against cuBLASLt's 3.0 GB at 4096 x 8192 x 8192).
template <int kStages_, bool kOutFp32_, int kClusterM_ = 1>
struct BlockScaledTraits : fp8::EpilogueStaging<128, kOutFp32_>, fp8::RegisterSplit {
  static constexpr int kBlockM = 128;  // two consumer warpgroups x 64 rows
  static constexpr int kBlockN = 128;  // = the B scale block: one B scale per tile per K block
  static constexpr int kBlockK = 128;  // = the scale block along K, one 128-byte swizzle row
  static constexpr int kStages = kStages_;
  static constexpr bool kOutFp32 = kOutFp32_;
  static constexpr int kConsumerWarpgroups = 2;
  static constexpr int kThreads = 128 * (1 + kConsumerWarpgroups);
  static constexpr int kClusterM = kClusterM_;
  static_assert(kClusterM == 1 || kClusterM == 2, "clusters of one or two CTAs along M");
  static constexpr int kSmemA = kBlockM * kBlockK;
  static constexpr int kSmemB = kBlockN * kBlockK;
  static constexpr int kScaleBytes = kBlockM * 4;

  // Two partials + the FP32 accumulator (3 x 64) fit in the consumers' 232 registers with room
  // for scales and addresses (fp8::RegisterSplit).
  static constexpr bool kDoubleBuffer = true;
  using Staging = fp8::EpilogueStaging<128, kOutFp32_>;

  struct alignas(1024) SharedStorage {
    uint8_t a[kStages][kSmemA];  // 1024-byte aligned: the 128B swizzle atom
    uint8_t b[kStages][kSmemB];
    uint8_t epi[kConsumerWarpgroups][Staging::kEpiSlots][Staging::kEpiSlotBytes];
    alignas(16) float sfa[kStages][kBlockM];  // the stage's A scales, one per tile row
    int tile_start[kSmemGroupTable + 1];      // grouped: first tile of each group (prefix sum)
    hopper::StageBarriers<kStages> bars;
  };
  static constexpr int kSmemBytes = static_cast<int>(sizeof(SharedStorage)) + 1024;  // + alignment slack
};

// Stages fill 227 KiB after the epilogue staging (32 KiB), the group table (4 KiB) and slack.
constexpr int blockscaled_stages() {
  return (fp8::kSm90MaxSmemPerBlock - 32768 - 4 * (kSmemGroupTable + 1) - 2048) / (16384 + 16384 + 512);
}

}  // namespace lowbit::blockscaled
