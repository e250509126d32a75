// Block-scaled mainloop pieces. The pipeline, the WGMMA issue and the partial accumulators are
// the FP8 GEMM's (gemm/core/mainloop.cuh); block scaling changes two things:
//  - each stage also carries the K block's A scales for the tile's rows (a bulk copy the producer
//    issues with the A and B tiles, completing on the same barrier; for the tiles that stream at
//    small M, one tensor copy of four K blocks' in the first of each four stages: ScaleStageLoad;
//    where A's rows are gathered, each row's own, copied with it: StackedGather)
//    and, where the traits say so (kStagedBScales), the tile's B scales of that K block (cp.async,
//    arriving on the same barrier), and
//  - promotion multiplies each finished K block's partial by (A scale of its row) x (the tile's
//    B scale for that K block) before adding it to the FP32 accumulator: one FFMA per element,
//    the same instruction count as the plain GEMM's FADD.
#pragma once

#include <cstdint>
#include <type_traits>

#include "gemm/core/mainloop.cuh"
#include "gemm/core/traits.cuh"
#include "hopper/cp_async.cuh"
#include "hopper/shared_storage.cuh"
#include "hopper/tma.cuh"

namespace lowbit::blockscaled {

// How a tile's columns meet the 128-column B scale blocks. Whole blocks (128, 256) and divisors of
// 128 (64, 32, 16) never share a scale between blocks; any other width straddles: at some tile
// starts its columns lie in two blocks, split at a column that depends on the start (a 192-wide
// tile at column 192 has 64 in one block and 128 in the next). Such a tile is cut into segments of
// gcd(width, 128) columns, each inside one block; a width that could reach a third block is not
// offered (176 at column 352 covers 352..527, three blocks).
constexpr int gcd_int(int a, int b) { return b == 0 ? a : gcd_int(b, a % b); }
template <int kBlockN>
inline constexpr bool kStraddlesScaleBlocks = kBlockN % 128 != 0 && 128 % kBlockN != 0;
template <int kBlockN>
inline constexpr int kScaleSegmentCols = gcd_int(kBlockN, 128);
// The B scales a tile takes per K block: one per 128-column part of a whole-block tile, two for a
// straddling one (its first block's and the next), one for a tile inside a block.
template <int kBlockN>
constexpr int scale_blocks_per_tile() {
  static_assert(!kStraddlesScaleBlocks<kBlockN> || kBlockN <= 128 + kScaleSegmentCols<kBlockN>,
                "a straddling tile lies in at most two B scale blocks");
  return kStraddlesScaleBlocks<kBlockN> ? 2 : kBlockN > 128 ? kBlockN / 128 : 1;
}

// A tile's B scale rows: sfb is [ceil(N / 128), k_blocks], one row per 128 columns. `first` is the
// row of the block holding the tile's first column, `part_stride` the floats to the next block's
// row (0 where that block lies past N: its outputs are clipped, any finite scale will do).
struct BScaleRows {
  const float* first;
  int part_stride;
};
template <int kBlockN>
__device__ __forceinline__ BScaleRows tile_b_scale_rows(const float* sfb, int k_blocks, int n, int n_block) {
  constexpr int kParts = scale_blocks_per_tile<kBlockN>();
  const int row = n_block * kBlockN / 128;
  return BScaleRows{sfb + static_cast<int64_t>(row) * k_blocks, kParts > 1 && (row + 1) * 128 < n ? k_blocks : 0};
}

// Producer side: the tile rows' A scales of K block kb -> ss.sfa[stage] (or of a group of K
// blocks, below). `sfa` points at the tile's first row; `bytes` covers the rows that exist, rounded
// up to 16 (the caller's sfa_ld is a multiple of 4, so the rounding stays inside the row). Rows past M keep stale values: they
// only scale zero-filled A rows, whose outputs the store clips.
// With T::kStagedBScales, also the tile's B scales of the K block -> ss.sfb[stage] (one per
// 128-column part; `sfb` is the first part's row of [ceil(N / 128), k_blocks], `sfb_part_stride`
// floats to the next part's row, 0 where that part lies past N). They are 4-byte pieces 4 *
// k_blocks bytes apart, too small and scattered for a bulk copy: cp.async, whose arrival when
// they land is one of the fill's expected arrivals (T::kStageCopyArrivals, counted at barrier
// init). In the ring, their L2 latency passes like the tiles' instead of in the consumers'
// promotion (docs/perf.md block-scaled v5).
// With T::kAScaleGroup = G > 1, one copy carries the A scales of G K blocks: the unit's K blocks
// in groups of G from its first, each group's first fill loading, through the A scales' tensor map
// (`sfa_map`: [k_blocks rows of M floats], boxes of G rows x gemm::KernelParams::bs.sfa_box columns,
// the A box's rows rounded up to 4), rows kb .. kb + G - 1 packed sfa_box apart into its stage's
// slot (rows past the last K block are zero fill, never read), and the consumers read all G at
// that fill (BlockScalePromotion::read_stage). The copies cost by their number, not their bytes
// (docs/perf.md block-scaled v13); the box stopping at M gained 1-2% at M = 1 (v16).
// Whether K block kb starts a group of `group` K blocks in a unit whose first is kb_begin (the
// producer's copy; the consumers' loop, unrolled by the group, fixes the same places statically).
__device__ __forceinline__ bool a_scale_group_start(int kb, int kb_begin, int group) {
  return (kb - kb_begin) % group == 0;
}

template <class T>
struct ScaleStageLoad {
  static constexpr int kGroup = gemm::AScaleGroup<T>::value;
  typename T::SharedStorage* ss;
  const float* sfa;
  int64_t sfa_ld;
  uint32_t bytes;
  const float* sfb = nullptr;
  int sfb_part_stride = 0;
  const CUtensorMap* sfa_map = nullptr;  // kGroup > 1
  int sfa_col = 0;                       // the tile's first row, the map's column
  int kb_begin = 0;                      // the unit's first K block
  uint32_t group_bytes = 0;              // kGroup > 1: a group's copy, kGroup x the box's columns x 4
  __device__ __forceinline__ bool group_start(int kb) const { return a_scale_group_start(kb, kb_begin, kGroup); }
  __device__ __forceinline__ void operator()(int stage, int kb, uint64_t* full) const {
    if constexpr (T::kStagedBScales) {
#pragma unroll
      for (int j = 0; j < T::kScaleBlocksN; ++j) hopper::cp_async_4(&ss->sfb[stage][j], sfb + j * sfb_part_stride + kb);
      hopper::cp_async_arrive_noinc(full);  // one of the fill's arrivals (T::kStageCopyArrivals)
    }
    if (bytes == 0) return;  // a cluster's phantom tile past the last M block, or gathered rows (their own scales)
    float* slot = reinterpret_cast<float*>(&ss->sfa[stage]);
    if constexpr (kGroup > 1) {
      if (group_start(kb)) hopper::tma_load_2d(slot, sfa_map, full, sfa_col, kb);
    } else {
      hopper::bulk_load(slot, sfa + static_cast<int64_t>(kb) * sfa_ld, bytes, full);
    }
  }
  // Per fill (counted with the tiles by the caller), and in a group's first fill.
  __device__ __forceinline__ uint32_t tx_bytes() const { return kGroup > 1 ? 0u : bytes; }
  __device__ __forceinline__ uint32_t fill_tx(int kb) const {
    if constexpr (kGroup > 1) return bytes != 0 && group_start(kb) ? group_bytes : 0u;
    else return 0u;
  }
};

// Consumer side (gemm::Consumer's Promotion policy). The A scales are read from the stage when
// the block's MMAs are issued, so the loads' latency passes under the MMAs; nothing uses them
// before the retire. The B scales of a K block (scale_blocks_per_tile of them): with
// T::kStagedBScales read from the stage with the A scales; otherwise loaded from global memory
// (L2) when the block before it is issued (gemm::Consumer fetches one group ahead).
// Accumulator fragment of m64nN: element 4g + 2h + e belongs to row 16 * warp + lane / 4 + 8h of
// the warpgroup's 64 rows and to column 8g + 2 * (lane % 4) + e.
template <class T>
struct BlockScalePromotion {
  static constexpr bool kStagedB = T::kStagedBScales;
  static constexpr bool kStraddles = kStraddlesScaleBlocks<T::kBlockN>;
  static constexpr int kSegCols = kScaleSegmentCols<T::kBlockN>;
  typename T::SharedStorage* ss;
  const float* sfb_row;  // the B scales of the tile's first block, one per K block
  // Floats from that row to the next block's row; 0 when that block lies past N (its outputs are
  // clipped, any finite scale will do).
  int sfb_part_stride;
  int row;  // this thread's first fragment row in the tile
  // A straddling tile's columns in its first scale block (128 - its start mod 128; at least the
  // width where the tile lies inside the block): per unit, so one compare per segment per K block.
  int lo_cols;
  // Grouped A scales (T::kAScaleGroup > 1, ScaleStageLoad): the thread's two rows' scales of the
  // group's K blocks. They are read at the group's first fill, before that fill's release (the
  // stage's slot is refilled after it), and used after it. The consumer's loop is unrolled by the
  // group (kStaticGroup), so each K block's place in its group is a constant: no check per block,
  // and the array is indexed statically (indexed by the K block it went to local memory).
  static constexpr int kAGroup = gemm::AScaleGroup<T>::value;
  static constexpr int kStaticGroup = kAGroup;
  // A third partial in flight on the 64-row tiles (Consumer::kDepth): 64 x 32 ran 2% faster
  // (docs/perf.md block-scaled v16).
  static constexpr bool kThirdPartial = true;
  float ahead0[kAGroup], ahead1[kAGroup];
  int a_pitch = T::kBlockM;  // floats between a group's K blocks in the slot (the map's box columns)

  static constexpr bool kReadsStage = true;  // the stage's A (and B) scales
  struct Fetched { float sb[T::kScaleBlocksN]; };
  struct None {};
  using Pending = std::conditional_t<kStagedB, None, Fetched>;

  // The policy of consumer warpgroup `consumer_wg`: its thread's first fragment row.
  __device__ __forceinline__ static BlockScalePromotion make(typename T::SharedStorage& ss, int consumer_wg) {
    const int t = static_cast<int>(threadIdx.x) % 128;
    return BlockScalePromotion{&ss, nullptr, 0, consumer_wg * 64 + (t / 32) * 16 + (t % 32) / 4, T::kBlockN, {}, {}};
  }
  // The unit's B scale rows (the core's parameters: gemm::KernelParams::bs) where the stages do
  // not carry them, and a straddling tile's split column.
  template <class Params>
  __device__ __forceinline__ void start_unit(const Params& p, const gemm::WorkUnit& w) {
    if constexpr (!kStagedB) {
      const BScaleRows r = tile_b_scale_rows<T::kBlockN>(p.bs.sfb, p.bs.k_blocks, p.n, w.n_block);
      sfb_row = r.first;
      sfb_part_stride = r.part_stride;
    }
    if constexpr (kStraddles) lo_cols = 128 - (w.n_block * T::kBlockN) % 128;
    if constexpr (kAGroup > 1) a_pitch = p.bs.sfa_box;
  }
  // The A scales of the thread's two fragment rows, and the stage's B scales where it has them.
  struct AScales { float sa0, sa1; };
  struct ABScales { float sa0, sa1, sb[T::kScaleBlocksN]; };
  using Staged = std::conditional_t<kStagedB, ABScales, AScales>;
  // The two rows' factors: for a part inside one block, and for a straddling tile per block too.
  struct OneBlock { float s0, s1; };
  struct TwoBlocks { float lo0, lo1, hi0, hi1; };
  using Scale = std::conditional_t<kStraddles, TwoBlocks, OneBlock>;

  __device__ __forceinline__ void issued(Pending& p, int kb) const {
    if constexpr (!kStagedB) {
#pragma unroll
      for (int j = 0; j < T::kScaleBlocksN; ++j) p.sb[j] = __ldg(sfb_row + j * sfb_part_stride + kb);
    }
  }
  // Explicit shared loads: the kernel's storage pointer is pinned (the compiler lost its address
  // space), and generic loads cost a 64-bit address and a longer latency per K block (docs/perf.md
  // block-scaled v11).
  // Grouped, the group's first fill's slot holds the group's K blocks (ScaleStageLoad): read at
  // that fill (kPos 0), all of them (the slot is refilled once its fill is released), and picked by
  // the K block's place in its group, kPos (gemm::Consumer's unrolled loop).
  template <int kPos>
  __device__ __forceinline__ Staged read_stage(int stage) {
    float sa0, sa1;
    if constexpr (kAGroup > 1) {
      static_assert(kPos >= 0 && kPos < kAGroup, "grouped A scales: the consumer's loop gives each K block's place");
      if constexpr (kPos == 0) {
        const float* slot = reinterpret_cast<const float*>(&ss->sfa[stage]) + row;
#pragma unroll
        for (int i = 0; i < kAGroup; ++i) {
          ahead0[i] = hopper::ld_shared_f32(slot + i * a_pitch);
          ahead1[i] = hopper::ld_shared_f32(slot + i * a_pitch + 8);
        }
      }
      sa0 = ahead0[kPos], sa1 = ahead1[kPos];
    } else {
      const float* sa = reinterpret_cast<const float*>(&ss->sfa[stage]) + row;
      sa0 = hopper::ld_shared_f32(sa), sa1 = hopper::ld_shared_f32(sa + 8);
    }
    if constexpr (!kStagedB) {
      return Staged{sa0, sa1};
    } else {
      Staged s{sa0, sa1, {}};
#pragma unroll
      for (int j = 0; j < T::kScaleBlocksN; ++j) s.sb[j] = hopper::ld_shared_f32(&ss->sfb[stage][j]);
      return s;
    }
  }
  __device__ __forceinline__ Scale scale(const Pending& p, const Staged& a, int /*stage*/, int /*consumer_wg*/,
                                         int part_n) const {
    const auto& sb = [&]() -> const float(&)[T::kScaleBlocksN] {
      if constexpr (kStagedB) return a.sb;
      else return p.sb;
    }();
    if constexpr (kStraddles) return Scale{a.sa0 * sb[0], a.sa1 * sb[0], a.sa0 * sb[1], a.sa1 * sb[1]};
    else return Scale{a.sa0 * sb[part_n], a.sa1 * sb[part_n]};
  }
  template <int R>
  __device__ __forceinline__ void apply(const Scale& s, const float (&part)[R], float (&acc)[R]) const {
    if constexpr (kStraddles) {
      static_assert(R == T::kBlockN / 2, "a straddling tile is promoted as one part");
      // Segment j's columns lie in one block: the first block's where they start before lo_cols
      // (segment 0 always; a segment from column 128 on never).
#pragma unroll
      for (int g = 0; g < R / 4; ++g) {
        const int seg_col = 8 * g / kSegCols * kSegCols;  // the first column of g's segment
        const bool lo = seg_col == 0 || (seg_col < 128 && seg_col < lo_cols);
        fma_group(part, acc, g, lo ? s.lo0 : s.hi0, lo ? s.lo1 : s.hi1);
      }
    } else {
#pragma unroll
      for (int g = 0; g < R / 4; ++g) fma_group(part, acc, g, s.s0, s.s1);
    }
  }
  template <int R>
  __device__ __forceinline__ static void fma_group(const float (&part)[R], float (&acc)[R], int g, float s0, float s1) {
    acc[4 * g + 0] = fmaf(part[4 * g + 0], s0, acc[4 * g + 0]);
    acc[4 * g + 1] = fmaf(part[4 * g + 1], s0, acc[4 * g + 1]);
    acc[4 * g + 2] = fmaf(part[4 * g + 2], s1, acc[4 * g + 2]);
    acc[4 * g + 3] = fmaf(part[4 * g + 3], s1, acc[4 * g + 3]);
  }
};

}  // namespace lowbit::blockscaled
