// Block-scaled FP8 on the GEMM core (gemm/core/kernel.cuh): the dense block-scaled GEMM is the
// core's kernel with two policies replaced, so it runs every core tile it can (64- and 128-row
// tiles of 32 to 256 columns, variants.def), split-K with the core's fix-up, the core's scheduler walk and
// its cost-model chooser:
//  - operands: the dense E4M3 tiles, and per stage the K block's A scales of the tile's rows and
//    B scales of its columns (ScaleStageLoad: a bulk copy and cp.async on the stage's barrier;
//    gathered rows bring their A scales themselves, StackedGather);
//  - promotion: each K block's partial times (A scale of its row) x (the tile's B scale), in FP32
//    (BlockScalePromotion), the recipe's precision.
// Split-K needs nothing more: every split promotes its own K blocks with their scales, and the
// fix-up adds FP32 partial tiles.
// The grouped layouts (descriptor array, masked, contiguous) are the same kernel with a third
// policy, the problems it walks (GroupedProblems, gemm/blockscaled/problems.cuh).
#pragma once

#include <cstdint>
#include <type_traits>

#include "gemm/blockscaled/epilogue_scatter.cuh"
#include "gemm/blockscaled/mainloop.cuh"
#include "gemm/blockscaled/problems.cuh"
#include "gemm/blockscaled/variant_table.h"
#include "gemm/core/problems.cuh"
#include "gemm/core/split_k.cuh"
#include "gemm/core/traits.cuh"

namespace lowbit::blockscaled {

// Dense E4M3 tiles (one K block per promotion: the scales change every K block) plus the stage's
// A and B scales.
struct BlockScaledOperands : gemm::DenseOperandsT<1> {
  // Rows past M keep stale scales (or, through the map, zeros and other K blocks' scales): they
  // only scale A rows past M (zero fill or stale slot bytes), whose outputs the store clips. The
  // bulk copy covers the rows that exist, rounded up to 16 bytes (sfa_ld is a multiple of 4 and the
  // tile's first row one of 64, so it stays inside the K block's row of scales). `sfa_map`: the A
  // scales' tensor map (the kernel's fourth), for T::kAScaleGroup > 1.
  template <class T, class Params>
  __device__ __forceinline__ static ScaleStageLoad<T> stage_extra(typename T::SharedStorage& ss, const Params& p,
                                                                  const gemm::WorkUnit& w, const CUtensorMap* sfa_map) {
    const int rows = max(0, min(p.m - w.m_block * T::kBlockM, T::kBlockM));
    const BScaleRows b = tile_b_scale_rows<T::kBlockN>(p.bs.sfb, p.bs.k_blocks, p.n, w.n_block);
    return ScaleStageLoad<T>{&ss,       p.bs.sfa + static_cast<int64_t>(w.m_block) * T::kBlockM,
                             p.bs.sfa_ld, static_cast<uint32_t>((rows + 3) / 4) * 16u,
                             b.first,   b.part_stride,
                             sfa_map,   w.m_block * T::kBlockM,
                             w.kb_begin, static_cast<uint32_t>(gemm::AScaleGroup<T>::value * p.bs.sfa_box * 4)};
  }
  // A grouped unit carries its group's scales (GroupedProblems::unit).
  template <class T, class Params>
  __device__ __forceinline__ static ScaleStageLoad<T> stage_extra(typename T::SharedStorage& ss, const Params&,
                                                                  const GroupedUnit& w, const CUtensorMap* /*aux*/) {
    static_assert(gemm::AScaleGroup<T>::value == 1, "grouped units: one A-scale copy per stage (no scale map)");
    // Gathered rows bring their own A scales (StackedGather::extras): no copy here.
    const int rows = gemm::kGathersA<T> ? 0 : max(0, min(w.m - w.m_block * T::kBlockM, T::kBlockM));
    return ScaleStageLoad<T>{&ss, w.sfa, w.sfa_ld, static_cast<uint32_t>((rows + 3) / 4) * 16u, w.sfb,
                             w.sfb_part_stride};
  }
};

// K blocks whose A scales travel in one copy (ScaleStageLoad). A copy per stage costs the tiles
// that stream at small M 5-14% whatever its size: the 64-row and 64-wide dense tiles take the
// scales of 4 K blocks per copy, through the A scales' tensor map (2-9% faster, docs/perf.md
// block-scaled v13). The others, whose stages are long enough to hide it, one per stage.
inline constexpr int kAScaleGroupBlocks = 4;
constexpr int a_scale_group(int block_m, int block_n, BsProblems problems) {
  return problems == BsProblems::kDense && (block_m == 64 || block_n <= 64) ? kAScaleGroupBlocks : 1;
}

// Stages that fill 227 KiB: the core's epilogue staging (8 KiB per slot per consumer
// warpgroup), its staged-operand slot (bias and channel scales, unused here: 6 bytes a column),
// the split-K landing slots, 3 KiB of barriers and alignment slack, and per stage the A and B
// tiles and the A scales (of `a_group` K blocks) and B scales.
constexpr int core_stages(int block_m, int block_n, int epi_slots, int cluster_splits, int a_group) {
  return (gemm::kSm90MaxSmemPerBlock - (block_m / 64) * epi_slots * 8192 - block_n * 6 -
          gemm::cluster_landing_bytes(block_m, block_n, cluster_splits) - 2048 - 1024) /
         (block_m * 128 + block_n * 128 + block_m * 4 * a_group + 16);
}
// Staging slots per consumer warpgroup. The 128 x 256 tile cannot have both 4 stages and 2 slots.
// The dense overlapped kernel takes 2 slots and 3 stages: its epilogue's 4 rounds per tile then
// stop waiting for the previous round's store, which paid at M = 4096 (1.5-2.7% over 8 shapes, 3% at
// K = 512 and 2048; block-scaled v9). The grouped and stacked kernels lost 1-1.5% that way and keep
// one slot and a fourth stage (as the first grouped kernel had, block-scaled v3), as do the
// non-overlapped ones (not measured otherwise).
constexpr int core_epi_slots(int block_m, int block_n, bool overlap, BsProblems problems) {
  if (block_m != 128 || block_n != 256) return 2;
  return overlap && problems == BsProblems::kDense ? 2 : 1;
}

// kOverlap: the next unit's first MMAs run under the epilogue (unsplit units only; the launcher
// picks it only where it is compiled and splits = 1).
// kClusterSplits_ > 1: split K runs in clusters of `splits` CTAs, reduced through distributed
// shared memory into rank 0 (gemm::split_k_cluster_reduce), for up to that many splits: the other
// the first other rank's partial lands in rank 0's epilogue staging, each further one in a slot
// that costs stages. 0: through the workspace.
// kProblems: one dense problem (gemm::DenseProblems), the grouped layouts (GroupedProblems) or
// stacked problems with the row scatter (StackedProblems, RowScatterEpilogue; FP32 sums):
// the last two unsplit 128-row tiles.
// The core's traits a block-scaled tile starts from: the plain epilogue, single CTAs, each K block
// promoted, its stages and staging slots as above.
template <int kBlockM, int kBlockN, bool kOutFp32, bool kOverlap, int kClusterSplits_, BsProblems kProblems>
using CoreBase =
    gemm::KernelTraits<kBlockN,
                       core_stages(kBlockM, kBlockN, core_epi_slots(kBlockM, kBlockN, kOverlap, kProblems),
                                   kClusterSplits_, a_scale_group(kBlockM, kBlockN, kProblems)),
                       kOutFp32, /*staged=*/false, /*cluster=*/1, /*promote_every=*/1, kBlockM, kOverlap,
                       /*uneven=*/false, /*fp16=*/false, core_epi_slots(kBlockM, kBlockN, kOverlap, kProblems)>;

template <int kBlockM, int kBlockN, bool kOutFp32, bool kOverlap = false, int kClusterSplits_ = 0,
          BsProblems kProblems = BsProblems::kDense>
struct CoreTraits : CoreBase<kBlockM, kBlockN, kOutFp32, kOverlap, kClusterSplits_, kProblems> {
  using Base = CoreBase<kBlockM, kBlockN, kOutFp32, kOverlap, kClusterSplits_, kProblems>;
  // A tile covers whole B scale blocks (128, 256), lies inside one (64), or straddles two (the
  // widths between, promoted as one part: BlockScalePromotion).
  static_assert(!kStraddlesScaleBlocks<kBlockN> || (kBlockN <= 192 && kProblems == BsProblems::kDense),
                "a straddling tile: one promoted part, dense problems");
  static constexpr bool kBlockScaled = true;
  static constexpr int kAScaleGroup = a_scale_group(kBlockM, kBlockN, kProblems);
  static constexpr int kScaleBlocksN = scale_blocks_per_tile<kBlockN>();
  // The B scales per stage, beside the A scales (ScaleStageLoad), for the 128-row tiles; the 64-row
  // tile's consumers fetch them from L2 a block ahead instead: staged, it ran 7-9% slower (64 x 64
  // at 64 x 4096 x 7168 unsplit 18.8 vs 17.3 us, at 128 x 2112 x 7168 split two ways 12.7 vs 11.8;
  // same call, docs/perf.md block-scaled v5).
  static constexpr bool kStagedBScales = kBlockM == 128;
  static constexpr int kStageCopyArrivals = kStagedBScales ? 1 : 0;  // their cp.async arrival per fill
  using Operands = BlockScaledOperands;
  using Promotion = BlockScalePromotion<CoreTraits>;
  struct alignas(1024) ScaledStorage : Base::SharedStorage {
    // The stage's A scales, one per tile row, of one K block, or a group's packed
    // gemm::KernelParams::bs.sfa_box apart (128-byte aligned: TMA).
    alignas(128) float sfa[Base::kStages][kAScaleGroup][kBlockM];
    alignas(16) float sfb[Base::kStages][4];        // its B scales (kScaleBlocksN of them)
  };
  static_assert(kProblems == BsProblems::kDense || (kBlockM == 128 && kClusterSplits_ == 0),
                "grouped and stacked: unsplit 128-row tiles");
  using Problems =
      std::conditional_t<kProblems == BsProblems::kGrouped, GroupedProblems<CoreTraits>,
                         std::conditional_t<kProblems == BsProblems::kStacked, StackedProblems<CoreTraits>,
                                            gemm::DenseProblems<CoreTraits>>>;
  // The stacked problems' epilogue: each output row scattered, weighted, into its own row.
  using RowScatter =
      std::conditional_t<kProblems == BsProblems::kStacked, RowScatterEpilogue<CoreTraits>, gemm::NoFamilyEpilogue>;
  static constexpr int kClusterSplits = kClusterSplits_;
  using SharedStorage = gemm::WithClusterLanding<ScaledStorage, kBlockN, Base::kConsumerWarpgroups, kClusterSplits_>;
  static constexpr int kSmemBytes = static_cast<int>(sizeof(SharedStorage)) + 1024;  // + alignment slack
  static_assert(Base::kStages >= 3, "a ring of at least three stages");
};

}  // namespace lowbit::blockscaled
