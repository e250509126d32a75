// Compile-time shape of the 2:4-sparse GEMM kernel variants: the FP8 GEMM kernel
// (gemm/core/kernel.cuh) with the sparse operand path, the plain epilogue (alpha, BF16 out).
#pragma once

#include <cstdint>

#include "formats/sparse24_layout.h"
#include "gemm/core/traits.cuh"
#include "gemm/sparse/operands.cuh"
#include "hopper/mbarrier.cuh"

namespace lowbit::sparse {

// Stages fill 227 KiB after 32 KiB of epilogue staging and 2 KiB of barriers and slack.
// (One staging slot per warpgroup and no slack fit a fifth stage at bn = 256: 6-15% slower for
// single CTAs, and CTA pairs with it only caught up with single CTAs, docs/perf.md W3 v3.)
constexpr int sparse_stages_for(int block_n) {
  return (gemm::kSm90MaxSmemPerBlock - 32768 - 2048) / (128 * 64 + block_n * 128 + 2048);
}

// kClusterM_ = 2: CTA pairs along M share each B tile by TMA multicast (each loads half). The
// dense B is 4/5 of a stage's bytes here, so L2 traffic per FLOP falls by 2/5.
// kPromote_: E4M3 partials promoted into FP32 every two K blocks (the default), or accumulated
// by the tensor cores across the whole K range (F16 always: its MMAs accumulate in FP32).
// kOutFp16_: D in FP16 instead of BF16.
template <formats::Sparse24Type kType, int kBlockN_, int kClusterM_ = 1,
          bool kPromote_ = kType == formats::Sparse24Type::kE4M3, bool kOutFp16_ = false>
struct SparseTraits : gemm::EpilogueStaging<kBlockN_, false, 2, kOutFp16_>, gemm::RegisterSplit {
  static constexpr formats::Sparse24Type kSparseType = kType;
  static constexpr int kBlockM = 128;  // two consumer warpgroups x 64 rows = two metadata slabs
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kBlockK = formats::sparse24_block_k(kType);  // logical columns per K block
  static constexpr int kStages = sparse_stages_for(kBlockN_);
  static constexpr bool kOutFp32 = false;
  static constexpr bool kFused = false;
  static constexpr bool kStaged = false;
  static constexpr bool kBlockScaled = false;
  using Promotion = gemm::PlainPromotion;
  static constexpr int kConsumerWarpgroups = 2;
  static constexpr int kThreads = 128 * (1 + kConsumerWarpgroups);
  static constexpr int kClusterM = kClusterM_;
  static_assert(kClusterM == 1 || kClusterM == 2, "clusters of one or two CTAs along M");
  static_assert(kBlockN_ % (8 * kClusterM_) == 0, "each CTA multicasts whole 8-row swizzle atoms of B");
  using Operands = SparseOperands<kType == formats::Sparse24Type::kE4M3 ? hopper::WgmmaKind::kE4M3
                                                                       : hopper::WgmmaKind::kF16,
                                 kPromote_>;
  using Staging = gemm::EpilogueStaging<kBlockN_, false, 2, kOutFp16_>;

  static constexpr int kSmemA = kBlockM * 64;    // compressed: 64 bytes per row per K block
  static constexpr int kSmemB = kBlockN * 128;   // dense: 128 bytes per row per K block
  static constexpr int kMetaBytes = 2 * formats::kSparseMetaBlockBytes;
  static_assert(kBlockM == formats::kSparseTileRows, "a tile is one prepacked slab pair");
  __host__ __device__ static constexpr uint32_t stage_tx_bytes(int a_rows) {
    return static_cast<uint32_t>(a_rows * 64 + kSmemB + kMetaBytes);
  }
  // Same register budget as the dense tiles (gemm::KernelTraits).
  static constexpr bool kDoubleBuffer = 3 * (kBlockN / 2) <= 192;

  struct alignas(1024) SharedStorage {
    uint8_t a[kStages][kSmemA];  // 1024-byte aligned: both swizzle atoms (512 / 1024 bytes)
    uint8_t b[kStages][kSmemB];
    alignas(16) uint8_t meta[kStages][kMetaBytes];
    uint8_t epi[kConsumerWarpgroups][Staging::kEpiSlots][Staging::kEpiSlotBytes];
    hopper::StageBarriers<kStages> bars;
  };
  static constexpr int kSmemBytes = static_cast<int>(sizeof(SharedStorage)) + 1024;
};

}  // namespace lowbit::sparse
