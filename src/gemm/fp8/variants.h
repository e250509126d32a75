// The FP8 GEMM's tiles, as data: the chooser scores them and the bench can force any of them.
// Which kernels are compiled for each tile (epilogues, outputs, promotion, pairs, overlap) is
// gemm/fp8/variants.def; every line there names a tile of this table (variant_launch.cuh checks).
#pragma once

#include "gemm/core/chooser.h"

namespace lowbit::fp8 {

// The fused epilogue's shared memory: the plain one's 32 KiB of output staging, plus both
// consumer warpgroups' row-broadcast rows (64 x block_n BF16 each) and bias slices
// (gemm/fp8/epilogue_fused.cuh).
constexpr int fp8_fused_epi_bytes(int block_n) { return 32768 + block_n * 256 + block_n * 4; }

// The fused epilogue with the whole row-broadcast tensor's N slice resident in shared memory
// (gemm/fp8/epilogue_fused.cuh): each CTA keeps one N block for its whole walk, so it loads
// pos[0:P, its columns] once instead of gathering 128 rows per tile -- the gather cost W2 ~650 us
// (docs/perf.md W2 v3, v4). One tile width, 128, and periods up to 256 rows (4 stages still fit):
// output staging + the rows (block_n / 64 chunks of rows x 128 bytes) + one bias slice.
constexpr int kFp8ResidentBlockN = 128;
constexpr int kFp8ResidentMaxRows = 256;
constexpr int fp8_resident_epi_bytes(int block_n, int rows) { return 32768 + block_n / 64 * rows * 128 + block_n * 2; }

// Stages fill what is left of 227 KiB after the epilogue's shared memory (plain: 16 KiB of
// output staging per consumer warpgroup and the staged bias; fused: fp8_fused_epi_bytes) and
// 2 KiB of barriers and alignment slack, divided by block_m * 128 bytes of A + block_n * 128 of B
// per stage.
constexpr int fp8_stages_for(int block_n, bool fused = false, int block_m = 128, int resident_rows = 0) {
  return (232448 -
          (resident_rows > 0 ? fp8_resident_epi_bytes(block_n, resident_rows)
           : fused           ? fp8_fused_epi_bytes(block_n)
                             : 16384 * (block_m / 64) + block_n * 2) -
          2048) /
         (block_m * 128 + block_n * 128);
}
static_assert(fp8_stages_for(kFp8ResidentBlockN, true, 128, kFp8ResidentMaxRows) >= 4,
              "the resident-rows variant keeps a 4-stage ring");

// With promotion each consumer thread holds the FP32 accumulator (block_n / 2 registers) and a
// partial: 192 columns fit in the 232 registers a consumer gets with a whole-width partial; 256
// fits by issuing each K block in two 128-column parts through one partial (gemm::Consumer).
constexpr gemm::TileSpec kFp8Variants[] = {
    {64, fp8_stages_for(64), fp8_stages_for(64, true), false, "narrow: more tiles for small M, deepest pipeline"},
    {128, fp8_stages_for(128), fp8_stages_for(128, true), true, "balanced default"},
    {192, fp8_stages_for(192), fp8_stages_for(192, true), true, "wide: less L2 traffic per FLOP for large M"},
    // No fused variant: with the staged row-broadcast rows only 2 stages would fit.
    {256, fp8_stages_for(256), 0, true, "widest: least L2 traffic per FLOP, two-part promotion"},
    // An in-between width, for tile counts that fill the last wave (DeepGEMM's unaligned block
    // sizes): 4096 x 2112 is 2.67 waves of 128 x 192 tiles on 132 SMs but 2.91 of 128 x 176.
    // No fused epilogue. (224 was measured too and lost everywhere: docs/perf.md W1 v6.)
    {176, fp8_stages_for(176), 0, true, "in-between: fills the last wave where 128/192/256 do not"},
    // 64 x 64 tiles, 13 stages (cuBLASLt's pick for M = 128, N = 4096, K = 7168 is the same tile
    // and depth): M = 128 in two tile rows instead of one split two ways along K, no fix-up. Plain
    // and bias epilogues, per-block promotion only.
    {64, fp8_stages_for(64, false, 64), 0, false, "short: 64-row tiles, small M without split-K", 64},
    // 64 x 112 tiles, 9 stages (cuBLASLt's tile and depth at 128 x 7168 x 2048, there in CTA pairs):
    // N = 7168 is 64 tiles, so M = 128 is 128 units on 132 SMs where 128 x 64 tiles give 112.
    {112, fp8_stages_for(112, false, 64), 0, false, "short and wider: 64-row tiles that fill the SMs at N = 7168",
     64},
    // 128-row tiles 80, 96 and 112 wide (no fused epilogue, per-block promotion): at two tile rows
    // (M = 256) the 128-wide tile leaves a wave 55-85% full at N = 4608-7168, and splitting K there
    // costs a second round; N / 64 columns make one whole wave of 128 units (cuBLASLt's 80 x 128 tile
    // at 256 x 5120 x 13824; docs/perf.md W1 v24).
    {80, fp8_stages_for(80), 0, false, "narrow 128-row: one wave at two tile rows, N near 5120"},
    {96, fp8_stages_for(96), 0, false, "narrow 128-row: one wave at two tile rows, N near 6144"},
    {112, fp8_stages_for(112), 0, false, "narrow 128-row: one wave at two tile rows, N near 7168"},
};
constexpr int kNumFp8Variants = sizeof(kFp8Variants) / sizeof(kFp8Variants[0]);

constexpr bool fp8_tile_listed(int block_m, int block_n) {
  for (const auto& v : kFp8Variants)
    if (v.block_m == block_m && v.block_n == block_n) return true;
  return false;
}

}  // namespace lowbit::fp8
