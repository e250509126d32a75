// The 2:4-sparse operand path of the FP8 GEMM mainloop (gemm/core/operands.cuh has the dense one).
// A stage holds, for one K block (128 logical columns of E4M3, 64 of F16 -- one 128-byte row of
// B either way):
//  - A: the 128 x 64-byte compressed values (64-byte swizzle), loaded by TMA;
//  - B: BN x 128 bytes, dense (128-byte swizzle), as in the dense GEMM;
//  - the 2 KiB of prepacked metadata of the tile's two 64-row slabs (formats/sparse24_layout.h),
//    one bulk copy on the same barrier: metadata is a pipelined operand like A and B.
// Each consumer thread reads its two metadata words (8 bytes, conflict-free) when it issues the
// K block; the K block is two sparse wgmma steps, each reading 32 bytes of every A row and 64
// bytes of every B row.
#pragma once

#include <cstdint>

#include "gemm/core/tile_scheduler.cuh"
#include "hopper/shared_storage.cuh"
#include "hopper/tma.cuh"
#include "hopper/wgmma.cuh"

namespace lowbit::sparse {

template <class T>
struct MetaStageLoad {
  typename T::SharedStorage* ss;
  const uint8_t* tile_meta;  // K block 0 of the tile's slab pair
  int64_t block_stride;      // bytes from one K block's blocks to the next's
  __device__ __forceinline__ void operator()(int stage, int kb, uint64_t* full) const {
    hopper::bulk_load(ss->meta[stage], tile_meta + kb * block_stride, T::kMetaBytes, full);
  }
  __device__ __forceinline__ uint32_t tx_bytes() const { return 0; }  // in SparseTraits::stage_tx_bytes
  __device__ __forceinline__ uint32_t fill_tx(int /*kb*/) const { return 0; }
};

template <hopper::WgmmaKind kKind, bool kPromote_>
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
                                                                 const gemm::WorkUnit& w, const CUtensorMap* /*aux*/) {
    // A cluster's phantom tile below the matrix (its A is all zero fill) reads the last tile's
    // metadata instead of past the buffer: any legal codes times zeros.
    const int64_t tiles_m = p.sparse_meta_block_stride / T::kMetaBytes;
    const int64_t m_block = w.m_block < tiles_m ? w.m_block : tiles_m - 1;
    return {&ss, p.sparse_meta + m_block * T::kMetaBytes, p.sparse_meta_block_stride};
  }

  // This thread's two metadata words of the stage (one per sparse wgmma step).
  struct StageRegs {
    uint32_t meta[2];
  };
  template <class T>
  __device__ __forceinline__ static StageRegs stage_regs(const typename T::SharedStorage& ss, int stage,
                                                         int consumer_wg) {
    const uint2 m = hopper::ld_shared_u32x2(ss.meta[stage] + consumer_wg * 1024 + (threadIdx.x % 128) * 8);
    return {{m.x, m.y}};
  }
  // The metadata registers are read by the in-flight MMAs (measured: reusing them for the next
  // group's words while the previous group ran gave wrong F16 results); keep them live until the
  // wait that retires those MMAs.
  __device__ __forceinline__ static void hold(StageRegs& regs) { hopper::fence_operands(regs.meta); }

  template <class T, int kPartN>
  __device__ __forceinline__ static void mma(const typename T::SharedStorage& ss, int stage, StageRegs regs,
                                             int consumer_wg, int b_row, float (&r)[kPartN / 2], bool accumulate) {
    using Op = hopper::WgmmaSpOp<kKind, kPartN>;
    static_assert(kSteps * kBBytesPerStep == 128 && kSteps * kABytesPerStep == 64, "one K block = two steps");
    const uint32_t* meta = regs.meta;
    const uint64_t desc_a = hopper::make_smem_desc(ss.a[stage] + consumer_wg * 64 * 64, 0, 8 * 64,
                                                   hopper::SmemSwizzle::k64B);
    const uint64_t desc_b = hopper::make_smem_desc(ss.b[stage] + b_row * 128, 0, 8 * 128,
                                                   hopper::SmemSwizzle::k128B);
    Op::mma(r, desc_a, desc_b, meta[0], accumulate);
    Op::mma(r, hopper::advance_desc(desc_a, kABytesPerStep), hopper::advance_desc(desc_b, kBBytesPerStep), meta[1],
            true);
  }
};

}  // namespace lowbit::sparse
