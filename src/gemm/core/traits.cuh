// The GEMM core's compile-time shape of one kernel variant (KernelTraits: tile, stages, epilogue
// staging, shared-memory layout), its parameters (KernelParams), and how it finds the policies a
// family's traits name.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "gemm/a_box.h"
#include "gemm/core/epilogue_params.h"
#include "gemm/core/operands.cuh"
#include "gemm/core/split_k.cuh"
#include "gemm/core/tile_scheduler.cuh"
#include "hopper/mbarrier.cuh"

namespace lowbit::gemm {

// The largest dynamic shared memory an sm_90 block may opt into (227 KiB). Kernels assert
// their layout against it at compile time; the launcher also checks the device's own limit.
constexpr int kSm90MaxSmemPerBlock = 232448;

// kStaged_: the bias is staged in shared memory by a producer warp (fused variants stage their
// operands their own way, gemm/fp8/epilogue_fused.cuh). The launcher uses the unstaged variant
// only without a bias: staging made the no-bias kernels 1-7% slower (docs/perf.md, W2 v2), and
// without a bias there is nothing to stage.
// The TMA-store epilogue's staging (TileEpilogue::store). The tile is stored in rounds of 128
// bytes of each row, one 8 KiB slot of 64 rows per round, two slots per consumer warpgroup so one
// round is written while the previous one is stored. A round holds 1, 2 or 4 chunks -- the TMA
// store boxes, 64 rows x epi_chunk_bytes (128, or 64 / 32 where the tile row is not a
// multiple of 128 bytes), each swizzled to its own width -- so a narrow chunk costs no extra
// barrier. kSlots = 1 (the block-scaled 128 x 256 tile, whose fourth stage needs the space): each
// round waits until the previous round's stores have read the slot.
// kOutFp16: 16-bit outputs are FP16 instead of BF16 (the 2:4-sparse F16 GEMM's option).
template <int kBlockN, bool kOutFp32, int kSlots = 2, bool kOutFp16_ = false>
struct EpilogueStaging {
  static constexpr int kOutBytes = kOutFp32 ? 4 : 2;
  static constexpr bool kOutFp16 = kOutFp16_;
  static_assert(!(kOutFp16_ && kOutFp32), "one output type");
  static constexpr int kEpiRowBytes = epi_chunk_bytes(kBlockN, kOutBytes);
  static constexpr int kEpiChunkCols = kEpiRowBytes / kOutBytes;
  static constexpr int kEpiSlotBytes = 64 * 128;  // one slot: a round of 64 rows
  static constexpr int kEpiSlots = kSlots;
  static_assert(kSlots == 1 || kSlots == 2, "one or two staging slots per consumer warpgroup");
  static constexpr int kEpiChunksPerRound = 128 / kEpiRowBytes;
  static constexpr int kEpiRoundCols = 128 / kOutBytes;
  static constexpr int kEpiRounds = (kBlockN + kEpiRoundCols - 1) / kEpiRoundCols;
  // Whether the next unit's first MMA group runs during the store (KernelTraits overrides it).
  static constexpr bool kOverlapEpilogue = false;
  static_assert(kBlockN % kEpiChunkCols == 0, "whole chunks per tile row");
  // The 16-byte unit of a staged row that holds unit u of row r, in the TMA swizzle of the
  // chunk's width (128B: u ^ r % 8; 64B: u ^ (r / 2) % 4; 32B: u ^ (r / 4) % 2). Conflict-free
  // for 8 consecutive rows in every mode.
  __device__ __forceinline__ static int epi_swizzle(int u, int r) {
    constexpr int kUnits = kEpiRowBytes / 16;
    constexpr int kShift = kEpiRowBytes == 128 ? 0 : kEpiRowBytes == 64 ? 1 : 2;
    return u ^ ((r >> kShift) & (kUnits - 1));
  }
};

// Register budget after setmaxnreg for one producer + two consumer warpgroups. The block starts
// with 168 per thread (65536 / 384, rounded down to 8) = 64512 of the SM's 65536; the consumers'
// increase must be covered by what the producer gives back plus the 1024 never allocated, or
// setmaxnreg.inc waits forever. 40 / 232: frees 128 * 128, takes 256 * 64 -- balanced.
// (32 / 240 hung the GPU tests.) With one consumer warpgroup (256 threads) the block starts at
// kConsumerRegs (59,392 registers) and the consumers' setmaxnreg takes nothing; it is issued for
// its convergence guarantee (gemm/core/kernel.cuh).
struct RegisterSplit {
  static constexpr int kProducerRegs = 40;
  static constexpr int kConsumerRegs = 232;
  static_assert(128 * (168 - kProducerRegs) + 1024 >= 256 * (kConsumerRegs - 168), "setmaxnreg budget");
};

// kClusterM_: CTAs per cluster along M. With 2, a CTA pair computes vertically adjacent tiles of
// the same B tile and each CTA loads half of B, multicast to both: L2 serves each B tile once per
// pair. Still 2-7% slower than single CTAs (down from 9-15% before the relay thread took the
// remote arrivals off the consumers' path, docs/perf.md W1 v9), so the launcher never picks it.
// kPromoteEvery_: K blocks the tensor cores accumulate before each FP32 promotion (DenseOperandsT).
// kBlockM_: tile rows, 64 per consumer warpgroup (128: two, 64: one; variants.h).
// kOverlap_: each unit's first MMA group is issued before the previous unit's epilogue, so the
// tensor cores work while the consumers scale, stage and store (Consumer::start). Only where
// nothing in the epilogue waits or branches per lane while the group is in flight: the plain
// epilogue; the staged one without a residual, whose operands are waited for before the group is
// issued and released by a predicated arrive (W1 v20); or a family's fused one where it says so
// (the FP8 family's with resident rows and neither activation nor residual,
// FusedEpilogue::apply_overlapped). No split-K fix-up
// (the launcher refuses splits), single CTAs. A divergent path with a wgmma group in flight makes
// ptxas serialize every wgmma of the kernel (C7518, docs/perf.md W1 v3 attempt); the TMA store is
// issued by a predicated instruction.
// kUneven_: uneven columns (UnevenColumnLayout): tiles of 256 and 240 columns, so that the
// tile count fills whole waves (N = 8192: 33 tiles a row instead of 32). Compiled for the
// overlapped 256-wide tile promoting every two K blocks, BF16 out, plain or staged.
// kOutFp16_: 16-bit outputs in FP16 instead of BF16 (the staged epilogue only).
// kEpiSlots_: epilogue staging slots per consumer warpgroup (EpilogueStaging); a family whose
// stages carry more (the block-scaled A scales) may trade one for a stage.
// kClusterSplits_ > 1: split K reduced within clusters of up to that many CTAs
// (split_k_cluster_reduce; the landing slots join SharedStorage); 0: through the workspace.
template <int kBlockN_, int kStages_, bool kOutFp32_, bool kStaged_ = true, int kClusterM_ = 1, int kPromoteEvery_ = 1,
          int kBlockM_ = 128, bool kOverlap_ = false, bool kUneven_ = false, bool kOutFp16_ = false,
          int kEpiSlots_ = 2, int kClusterSplits_ = 0, bool kStreamK_ = false>
struct KernelTraits : EpilogueStaging<kBlockN_, kOutFp32_, kEpiSlots_, kOutFp16_>, RegisterSplit {
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kBlockK = 128;  // 128 E4M3 bytes: one 128-byte swizzle row
  static constexpr int kStages = kStages_;
  static constexpr bool kOutFp32 = kOutFp32_;
  // A family's fused epilogue (T::FusedEpilogue) replaces the staged one where its traits say so
  // (the FP8 family's WithFusedEpilogue).
  static constexpr bool kFused = false;
  static constexpr bool kStaged = kStaged_;
  static constexpr int kConsumerWarpgroups = kBlockM / 64;
  static constexpr int kThreads = 128 * (1 + kConsumerWarpgroups);
  static_assert(kBlockM == 128 || (kBlockM == 64 && kClusterM_ == 1), "64-row tiles: single CTAs");
  static constexpr int kClusterM = kClusterM_;
  static constexpr bool kOverlapEpilogue = kOverlap_;
  static constexpr bool kUneven = kUneven_;
  // Stream-K over the last tiles (StreamKWalk): split units and their fix-up, so no overlap,
  // cluster, fused epilogue or split in a cluster.
  static constexpr bool kStreamK = kStreamK_;
  static_assert(!kStreamK_ || (!kOverlap_ && kClusterM_ == 1 && kClusterSplits_ == 0 && !kUneven_),
                "stream-K: split units through the workspace, single CTAs, the plain or staged epilogue");
  static_assert(!kUneven_ || (kOverlap_ && kBlockN_ == 256 && kPromoteEvery_ == 2 && kBlockM_ == 128 && !kOutFp32_ &&
                              kClusterM_ == 1),
                "uneven columns: the overlapped 256-wide tile, promote=2, BF16 out, plain or staged");
  static_assert(!kOverlap_ || kClusterM_ == 1, "the overlapped epilogue: single CTAs");
  using Operands = DenseOperandsT<kPromoteEvery_>;
  static_assert(kClusterM == 1 || kClusterM == 2, "clusters of one or two CTAs along M");
  static_assert(kBlockN_ % (8 * kClusterM_) == 0, "each CTA multicasts whole 8-row swizzle atoms of B");

  static constexpr int kSmemA = kBlockM * kBlockK;  // bytes per stage
  static constexpr int kSmemB = kBlockN * kBlockK;
  static_assert(!kOutFp16_ || kStaged_, "FP16 out: the staged epilogue");
  using Staging = EpilogueStaging<kBlockN_, kOutFp32_, kEpiSlots_, kOutFp16_>;
  // How finished K blocks join the accumulator (a family's traits may derive and replace it:
  // gemm/blockscaled/core_traits.cuh).
  static constexpr bool kBlockScaled = false;
  using Promotion = PlainPromotion;
  // Bytes TMA lands per stage when the A box has `a_rows` rows (128, or 64 when M <= 64).
  __host__ __device__ static constexpr uint32_t stage_tx_bytes(int a_rows) {
    return static_cast<uint32_t>(a_rows * kBlockK + kSmemB);
  }

  // Two partial accumulators + the FP32 accumulator must fit in kConsumerRegs with room for
  // addresses: 3 x 64 = 192 for BN = 128 does, 3 x 96 = 288 for BN = 192 does not.
  static constexpr bool kDoubleBuffer = 3 * (kBlockN / 2) <= 192;

  // Plain variants with a bias or per-channel scales: their slices, staged per unit by a
  // producer warp (StagedEpilogueOperands in gemm/core/epilogue.cuh). The per-token scales need
  // no shared memory: each consumer thread loads its two rows' before the unit's mainloop.
  struct StagedOperands {
    alignas(16) __nv_bfloat16 bias[kBlockN];
    alignas(16) float col_scale[kBlockN];
    uint64_t full;   // the loader arms it with the unit's byte count; bulk copies complete it
    uint64_t empty;  // every working consumer warp arrives once it has read the operands
  };
  // The shared memory: the stages, the epilogue staging, the epilogue's operands (`Ops`) and the
  // ring's barriers. The core's operands are the staged bias and channel scales; a fused variant's
  // traits lay out their own in the same place (the FP8 family's WithFusedEpilogue,
  // gemm/fp8/epilogue_fused.cuh).
  template <class Ops>
  struct alignas(1024) StorageWith {
    uint8_t a[kStages][kSmemA];  // 1024-byte aligned: the 128B swizzle atom
    uint8_t b[kStages][kSmemB];
    uint8_t epi[kConsumerWarpgroups][Staging::kEpiSlots][Staging::kEpiSlotBytes];
    Ops ops;
    hopper::StageBarriers<kStages> bars;
  };
  using Storage = StorageWith<StagedOperands>;
  static constexpr int kClusterSplits = kClusterSplits_;
  using SharedStorage = WithClusterLanding<Storage, kBlockN, kConsumerWarpgroups, kClusterSplits_>;
  static constexpr int kSmemBytes = static_cast<int>(sizeof(SharedStorage)) + 1024;  // + alignment slack
};

// K blocks whose A scales one copy carries (T::kAScaleGroup where a family has it: the block-scaled
// tiles that stream at small M; gemm/blockscaled/core_traits.cuh), else 1.
template <class T, class = void>
struct AScaleGroup : std::integral_constant<int, 1> {};
template <class T>
struct AScaleGroup<T, std::void_t<decltype(T::kAScaleGroup)>> : std::integral_constant<int, T::kAScaleGroup> {};

// A policy type T names (the member type Member<T>), or Default where it names none.
template <template <class> class Member, class T, class Default, class = void>
struct PolicyOr {
  using type = Default;
};
template <template <class> class Member, class T, class Default>
struct PolicyOr<Member, T, Default, std::void_t<Member<T>>> {
  using type = Member<T>;
};

// A family's own epilogue, named by its traits, which the core runs in place of its element math
// and stores (the core includes no family's epilogue):
//  - T::FusedEpilogue, with T::kFused: the row broadcast, activation and residual, with producer
//    warps staging their operands (the FP8 family's, gemm/fp8/epilogue_fused.cuh);
//  - T::RowScatter: each output row weighted into its own row of an FP32 matrix, in the overlapped
//    unit loop (the block-scaled stacked problems', gemm/blockscaled/epilogue_scatter.cuh).
// NoFamilyEpilogue where T names none (or names this).
struct NoFamilyEpilogue {};
template <class T>
using FusedEpilogueMember = typename T::FusedEpilogue;
template <class T>
using RowScatterMember = typename T::RowScatter;
template <class T>
using FusedEpilogueOf = typename PolicyOr<FusedEpilogueMember, T, NoFamilyEpilogue>::type;
template <class T>
using RowScatterOf = typename PolicyOr<RowScatterMember, T, NoFamilyEpilogue>::type;
template <class T>
inline constexpr bool kScattersRows = !std::is_same_v<RowScatterOf<T>, NoFamilyEpilogue>;

// Arrivals that complete a stage fill: the producer's, plus the arrivals its per-thread copies make
// when they land (T::kStageCopyArrivals where a family has them: the block-scaled B scales). A
// gathering producer adds one per gathering thread (kGathersA, gemm/core/kernel.cuh).
template <class T, class = void>
struct StageFillArrivals : std::integral_constant<uint32_t, 1> {};
template <class T>
struct StageFillArrivals<T, std::void_t<decltype(T::kStageCopyArrivals)>>
    : std::integral_constant<uint32_t, 1 + T::kStageCopyArrivals> {};

struct KernelParams {
  TileSchedule sched;
  int m, n, k;
  EpilogueParams epi;
  float* partials;               // split-K partial tiles (null when splits == 1)
  int* tile_counters;            // split-K arrival counters, one per tile
  // Rows of the A box: the tile's rows (T::kBlockM), or M where M is smaller (a_box_rows:
  // boxes past the tensor's last row stream far slower). Consumer warpgroups whose 64 rows start at
  // or past it idle.
  int a_box_rows;
  // The last tile row's A box where it stops short of a_box_rows (a_tail): a_tail_rows rows,
  // loaded by tile row a_tail_block through the kernel's tm_a_tail (kATailMap in
  // gemm/core/kernel.cuh). 0 rows: every tile loads a_box_rows.
  int a_tail_rows;
  int a_tail_block;
  // 2:4-sparse A only (gemm/sparse): the prepacked metadata, one 1 KiB block per 64 rows and K
  // block, blocks of one K block adjacent (meta_block_stride bytes from one K block to the next).
  const uint8_t* sparse_meta;
  int64_t sparse_meta_block_stride;
  // Block-scaled operands only (gemm/blockscaled/core_traits.cuh): A's scales, K-block-major
  // [k_blocks, sfa_ld]; B's, [ceil(N / 128), k_blocks].
  struct BlockScales {
    const float* sfa;
    int64_t sfa_ld;
    const float* sfb;
    int k_blocks;
    // Columns of the A scales' map box (T::kAScaleGroup > 1): the A box's rows rounded up to 4
    // (16-byte rows), so the box stops at M as the A box does; the pitch of a group's slot.
    int sfa_box;
  } bs;
  // sched's walk (TileWalk::of).
  TileWalk walk;
  // Uneven columns (T::kUneven only; after the fields every kernel reads, so those keep their
  // parameter layout).
  UnevenColumnLayout uneven;
  // Grouped problems (a family's grouped layout, T::Problems: gemm/blockscaled/problems.cuh): the
  // descriptors, their count, and the tile offsets [groups + 1] and tensor maps [groups][A, B, D]
  // the preparation kernel wrote. Last, for the same reason.
  struct Groups {
    const void* descriptors;
    int count;
    const int* tile_start;
    const CUtensorMap* maps;
  } groups;
  // Stacked problems (gemm/blockscaled/problems.cuh StackedProblems: every group's rows in one A,
  // its B rows in one B of `count` blocks of n rows): group g owns `rows[g]` rows of A from
  // `row0[g]`, and its tiles' output rows are scattered (the row scatter, gemm/blockscaled/epilogue_scatter.cuh).
  struct Stacked {
    const int* rows;
    const int* row0;
  } stacked;
  // The row scatter: A row r's output row goes, times weight[r], to row target[r] / target_div of
  // `out` ([targets, ld] FP32), added (red.add: rows that share a target sum in any order) or stored.
  struct RowScatter {
    const int* target;
    const float* weight;
    float* out;
    int64_t ld;
    int target_div;
    bool add;
  } scatter;
  // Stream-K (T::kStreamK only, StreamKWalk): last, so every other kernel keeps its
  // parameter layout.
  StreamKWalk sk;
  // Stacked problems that gather A's rows (kGathersA; the block-scaled StackedProblems): stacked
  // row r of A is row index[r] / index_div of `a` ([rows, k] E4M3, k bytes a row, at most 4 GiB:
  // the producer's offsets are 32-bit), and its A scales are that row's in bs ([k_blocks,
  // bs.sfa_ld]). Last, for the same reason.
  // b_evict_first: B's loads mark their L2 lines first to evict (the family's choice; the fused
  // MoE's, docs/perf.md W6 v8).
  struct Gather {
    const uint8_t* a;
    const int* index;
    int index_div;
    bool b_evict_first;
  } gather;

  // The problem both launchers (dense and 2:4-sparse) fill the same way: shape, A box, scales.
  void set_problem(int64_t m_, int64_t n_, int64_t k_, int a_box_rows_, float alpha, const float* a_scale,
                   const float* b_scale) {
    m = static_cast<int>(m_);
    n = static_cast<int>(n_);
    k = static_cast<int>(k_);
    a_box_rows = a_box_rows_;
    a_tail_rows = 0;
    a_tail_block = -1;
    epi.alpha = alpha;
    epi.a_scale = a_scale;
    epi.b_scale = b_scale;
  }
  // The last tile row's shorter A box (a_tail), for a launch that passes its map.
  void set_a_tail(const ATail& t) {
    a_tail_rows = t.rows;
    a_tail_block = t.block;
  }
};

}  // namespace lowbit::gemm
