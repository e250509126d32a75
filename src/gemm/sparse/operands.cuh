// The 2:4-sparse operand path of the FP8 GEMM mainloop (gemm/fp8/operands.cuh has the dense one).
// A stage holds, for one K block (128 logical columns of E4M3, 64 of F16 -- one 128-byte row of
// B either way):
//  - A: the 128 x 64-byte compressed values (64-byte swizzle), loaded by TMA;
//  - B: BN x 128 bytes, dense (128-byte swizzle), as in the dense GEMM;
//  - the prepacked metadata of the tile's 64-row slabs, 1 KiB each (formats/sparse24_layout.h),
//    bulk-copied on the same barrier: metadata is a pipelined operand like A and B.
// Each consumer thread reads its two metadata words per slab (8 bytes, conflict-free) when it
// issues the K block; the K block is two sparse wgmma steps per slab, each reading 32 bytes of
// every A row and 64 bytes of every B row.
#pragma once

#include <cstdint>

#include "formats/sparse24_layout.h"
#include "gemm/tile_scheduler.cuh"
#include "hopper/shared_storage.cuh"
#include "hopper/tma.cuh"
#include "hopper/wgmma.cuh"

namespace lowbit::sparse {

// The layout pads slabs to pairs (128 rows), so a 256-row tile copies two pairs; a pair wholly
// below the matrix (its A rows are TMA zero fill) copies the last pair's metadata instead of
// reading past the buffer: any legal codes times zeros.
template <class T>
struct MetaStageLoad {
  static constexpr int kPairBytes = 2 * formats::kSparseMetaBlockBytes;
  static constexpr int kPairs = T::kMetaBytes / kPairBytes;
  typename T::SharedStorage* ss;
  const uint8_t* pair_meta[kPairs];  // K block 0 of each of the tile's slab pairs
  int64_t block_stride;              // bytes from one K block's blocks to the next's
  __device__ __forceinline__ void operator()(int stage, int kb, uint64_t* full) const {
#pragma unroll
    for (int j = 0; j < kPairs; ++j)
      hopper::bulk_load(ss->meta[stage] + j * kPairBytes, pair_meta[j] + kb * block_stride, kPairBytes, full);
  }
};

// kSlabs: 64-row slabs per consumer warpgroup (T::kConsumerSlabs).
template <hopper::WgmmaKind kKind, bool kPromote_, int kSlabs = 1>
struct SparseOperands {
  static constexpr bool kReadsStage = true;  // the metadata words, by ordinary loads
  // F16 MMAs accumulate in full FP32 (only FP8 needs promotion): F16 accumulates straight into
  // the FP32 registers across the whole K range.
  static constexpr bool kPromote = kPromote_;
  // A sparse K block multiplies half as many values per row as a dense one: two of them per
  // partial keep the dense path's 128 products per promotion (and halve the waits and adds).
  // Without promotion a group is one K block: the consumer then holds two stages (the running
  // group and the queued one), not four, and the producer keeps the rest of the ring filling.
  static constexpr int kBlocksPerPromotion = kPromote ? 2 : 1;
  static constexpr int kSteps = 2;           // sparse wgmma steps per K block
  static constexpr int kABytesPerStep = 32;  // compressed A bytes per row per step
  static constexpr int kBBytesPerStep = 64;  // dense B bytes per row per step

  template <class T>
  __host__ __device__ static constexpr int a_cols_per_block() {
    return T::kBlockK / 2;
  }

  template <class T, class Params>
  __device__ __forceinline__ static MetaStageLoad<T> stage_extra(typename T::SharedStorage& ss, const Params& p,
                                                                 const gemm::WorkUnit& w) {
    // A cluster's phantom tile, or a 256-row tile's second pair, below the matrix.
    using Load = MetaStageLoad<T>;
    const int64_t pairs = p.sparse_meta_block_stride / Load::kPairBytes;
    Load load{&ss, {}, p.sparse_meta_block_stride};
#pragma unroll
    for (int j = 0; j < Load::kPairs; ++j) {
      const int64_t pair = static_cast<int64_t>(w.m_block) * Load::kPairs + j;
      load.pair_meta[j] = p.sparse_meta + (pair < pairs ? pair : pairs - 1) * Load::kPairBytes;
    }
    return load;
  }

  // This thread's two metadata words per slab of the stage (one per sparse wgmma step).
  struct StageRegs {
    uint32_t meta[2 * kSlabs];
  };
  template <class T>
  __device__ __forceinline__ static StageRegs stage_regs(const typename T::SharedStorage& ss, int stage,
                                                         int consumer_wg) {
    StageRegs regs;
#pragma unroll
    for (int s = 0; s < kSlabs; ++s) {
      const uint2 m = hopper::ld_shared_u32x2(ss.meta[stage] + (consumer_wg * kSlabs + s) * formats::kSparseMetaBlockBytes +
                                              (threadIdx.x % 128) * 8);
      regs.meta[2 * s] = m.x;
      regs.meta[2 * s + 1] = m.y;
    }
    return regs;
  }
  // The metadata registers are read by the in-flight MMAs (measured: reusing them for the next
  // group's words while the previous group ran gave wrong F16 results); keep them live until the
  // wait that retires those MMAs.
  __device__ __forceinline__ static void hold(StageRegs& regs) { hopper::fence_operands(regs.meta); }

  // `r` holds the warpgroup's slabs one after the other (kPartN / 2 registers each). The steps
  // alternate between slabs, so consecutive MMAs never chain on one accumulator.
  template <class T, int kPartN, int kRegs>
  __device__ __forceinline__ static void mma(const typename T::SharedStorage& ss, int stage, StageRegs regs,
                                             int consumer_wg, int part_n, float (&r)[kRegs], bool accumulate) {
    using Op = hopper::WgmmaSpOp<kKind, kPartN>;
    static_assert(kSteps * kBBytesPerStep == 128 && kSteps * kABytesPerStep == 64, "one K block = two steps");
    static_assert(kRegs == kSlabs * kPartN / 2, "one accumulator per slab");
    const uint64_t desc_b = hopper::make_smem_desc(ss.b[stage] + part_n * kPartN * 128, 0, 8 * 128,
                                                   hopper::SmemSwizzle::k128B);
#pragma unroll
    for (int step = 0; step < kSteps; ++step)
#pragma unroll
      for (int s = 0; s < kSlabs; ++s) {
        const uint64_t desc_a = hopper::make_smem_desc(ss.a[stage] + (consumer_wg * kSlabs + s) * 64 * 64, 0, 8 * 64,
                                                       hopper::SmemSwizzle::k64B);
        Op::mma(*reinterpret_cast<float(*)[kPartN / 2]>(r + s * (kPartN / 2)),
                hopper::advance_desc(desc_a, step * kABytesPerStep), hopper::advance_desc(desc_b, step * kBBytesPerStep),
                regs.meta[2 * s + step], accumulate || step > 0);
      }
  }
};

}  // namespace lowbit::sparse
