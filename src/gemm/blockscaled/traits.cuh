// Compile-time shape of the block-scaled FP8 GEMM (dense and grouped) and its shared memory.
// Block scaling (the DeepSeek-V3 recipe): A carries one FP32 scale per row per 128-wide K block
// ("1x128"), B one per 128 x 128 block. The tile is 128 rows, so each stage carries the 128 A
// scales of its K block, and 128 or 256 columns: one or two B scale blocks, each the width of
// one partial accumulator, so a partial is promoted with a single B scale.
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
// kBlockN_ = 256: a quarter fewer operand bytes per FLOP through L2 than 128 x 128 (the plain
// GEMM's lesson, docs/perf.md W1 v4), each K block issued as two 128-column parts through one
// partial (acc 128 + partial 64 registers); 128: double-buffered whole-width partials.
// kEpiSlots_: the epilogue's staging slots per consumer warpgroup (fp8::EpilogueStaging).
template <int kStages_, bool kOutFp32_, int kClusterM_ = 1, int kBlockN_ = 128, int kEpiSlots_ = 2>
struct BlockScaledTraits : fp8::EpilogueStaging<kBlockN_, kOutFp32_, kEpiSlots_>, fp8::RegisterSplit {
  static constexpr int kBlockM = 128;  // two consumer warpgroups x 64 rows
  static constexpr int kBlockN = kBlockN_;
  static_assert(kBlockN == 128 || kBlockN == 256, "whole B scale blocks: 128 or 256 columns");
  static constexpr int kScaleBlocksN = kBlockN / 128;  // B scales per tile per K block
  static constexpr bool kStagedBScales = true;         // per stage, beside the A scales (ScaleStageLoad)
  static constexpr int kStageCopyArrivals = 1;         // their cp.async arrival per fill
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

  // 128 columns: two partials + the FP32 accumulator (3 x 64) fit in the consumers' 232
  // registers with room for scales and addresses (fp8::RegisterSplit); 256: one 64-register
  // partial per 128-column part.
  static constexpr bool kDoubleBuffer = kBlockN == 128;
  using Staging = fp8::EpilogueStaging<kBlockN_, kOutFp32_, kEpiSlots_>;

  struct alignas(1024) SharedStorage {
    uint8_t a[kStages][kSmemA];  // 1024-byte aligned: the 128B swizzle atom
    uint8_t b[kStages][kSmemB];
    uint8_t epi[kConsumerWarpgroups][Staging::kEpiSlots][Staging::kEpiSlotBytes];
    alignas(16) float sfa[kStages][kBlockM];  // the stage's A scales, one per tile row
    alignas(16) float sfb[kStages][4];        // its B scales, one per 128-column part
    int tile_start[kSmemGroupTable + 1];      // grouped: first tile of each group (prefix sum)
    hopper::StageBarriers<kStages> bars;
  };
  static constexpr int kSmemBytes = static_cast<int>(sizeof(SharedStorage)) + 1024;  // + alignment slack
};

// Epilogue staging slots per consumer warpgroup: the 128 x 256 tile gives up one of the two for a
// fourth stage (3 stages with two slots measured 2-8% slower, docs/perf.md block-scaled v3).
constexpr int blockscaled_epi_slots(int block_n) { return block_n == 128 ? 2 : 1; }

// Stages that fill 227 KiB after the epilogue staging (8 KiB per slot per consumer warpgroup),
// the group table (4 KiB) and slack: 128 x 128 with two slots: 5; 128 x 256 with one slot: 4.
constexpr int blockscaled_stages(int block_n, int epi_slots) {
  return (fp8::kSm90MaxSmemPerBlock - 2 * epi_slots * 8192 - 4 * (kSmemGroupTable + 1) - 2048) /
         (128 * 128 + block_n * 128 + 128 * 4 + 16);
}

}  // namespace lowbit::blockscaled
