// Operand paths of the GEMM core's mainloop: what a stage holds besides the barriers and how a
// consumer warpgroup turns it into wgmma instructions. The dense path lives here; the 2:4-sparse
// one (gemm/sparse/operands.cuh) provides the same members, so the producer, the consumer's
// pipeline and promotion, the scheduler and the epilogue are shared.
#pragma once

#include <cstdint>

#include "gemm/core/tile_scheduler.cuh"
#include "hopper/wgmma.cuh"

namespace lowbit::gemm {

// Extra bytes a mainloop variant lands in each stage besides the A and B tiles (block-scaled A
// scales, sparse metadata); the dense GEMM has none.
// `tx_bytes`: what it lands per stage beyond the traits' stage_tx_bytes (counted on the stage's
// barrier with the tiles); `fill_tx(kb)`: what it lands besides in K block kb's fill only (the
// block-scaled A scales of a group of K blocks, in the group's first fill).
struct NoStageExtra {
  __device__ __forceinline__ void operator()(int /*stage*/, int /*kb*/, uint64_t* /*full*/) const {}
  __device__ __forceinline__ uint32_t tx_bytes() const { return 0; }
  __device__ __forceinline__ uint32_t fill_tx(int /*kb*/) const { return 0; }
};

// How a finished K block's partial accumulator joins the FP32 accumulator. The plain GEMM adds
// it; the block-scaled GEMM multiplies it by its rows' A scales and the tile's B scale first
// (gemm/blockscaled/mainloop.cuh). Each in-flight partial carries `Pending` (what the promotion
// fetched from global memory, a group ahead) and `Staged` (what it read from the stage when the
// MMAs were issued: the loads' latency then passes under the MMAs instead of after the wait);
// `scale` combines them, or reads the stage itself, once the MMAs of the partial's column part
// `part_n` retire, before the stage is released.
// A kernel takes its promotion policy from its traits (T::Promotion): `make` builds a consumer
// warpgroup's policy, `start_unit` points it at a unit's scales before the unit's first group.
struct PlainPromotion {
  static constexpr bool kReadsStage = false;  // reads nothing the producer writes
  template <class SharedStorage>
  __device__ __forceinline__ static PlainPromotion make(SharedStorage&, int /*consumer_wg*/) {
    return {};
  }
  template <class Params>
  __device__ __forceinline__ void start_unit(const Params&, const WorkUnit&) {}
  struct Pending {};
  struct Staged {};
  struct Scale {};
  __device__ __forceinline__ void issued(Pending&, int /*kb*/) const {}
  static constexpr int kStaticGroup = 1;  // K blocks whose place in a group the consumer's loop fixes
  // A third partial in flight on the 64-row tiles (Consumer::kDepth) cost the per-tensor ones up to
  // 1.5% (docs/perf.md block-scaled v16).
  static constexpr bool kThirdPartial = false;
  template <int kPos>
  __device__ __forceinline__ Staged read_stage(int /*stage*/) { return {}; }
  __device__ __forceinline__ Scale scale(const Pending&, const Staged&, int /*stage*/, int /*consumer_wg*/,
                                         int /*part_n*/) const {
    return {};
  }
  template <int R>
  __device__ __forceinline__ void apply(const Scale&, const float (&part)[R], float (&acc)[R]) const {
#pragma unroll
    for (int i = 0; i < R; ++i) acc[i] += part[i];
  }
};


// Dense E4M3: a stage holds A [128 x kBlockK] and B [BN x kBlockK], both K-major with the
// 128-byte swizzle TMA writes; a K block is kBlockK / 32 wgmma k32 steps.
// E4M3 MMAs accumulate with fewer mantissa bits than FP32, so partials are promoted into FP32
// registers every kGroup K blocks: 1 (128 products per partial, cuBLASLt's error) or 2 (half the
// promotion adds and waits; the FP32-out error grows, docs/perf.md W1).
template <int kGroup = 1>
struct DenseOperandsT {
  static_assert(kGroup == 1 || kGroup == 2, "promotion every one or two K blocks");
  static constexpr bool kReadsStage = false;  // consumers read the stage only through wgmma
  static constexpr int kBlocksPerPromotion = kGroup;
  static constexpr bool kPromote = true;

  // A columns (elements of A's tensor map) per K block.
  template <class T>
  __host__ __device__ static constexpr int a_cols_per_block() {
    return T::kBlockK;
  }

  // What the producer adds to each stage of unit `w` (nothing). `aux`: the kernel's fourth tensor
  // map, which a family may load its extras through (block-scaled: the A scales').
  template <class T, class Params>
  __device__ __forceinline__ static NoStageExtra stage_extra(typename T::SharedStorage&, const Params&,
                                                             const WorkUnit&, const CUtensorMap* /*aux*/) {
    return {};
  }

  // Registers a stage's MMAs take besides descriptors (none here; the sparse metadata there),
  // read before the warpgroup fence.
  struct StageRegs {};
  template <class T>
  __device__ __forceinline__ static StageRegs stage_regs(const typename T::SharedStorage&, int, int) {
    return {};
  }
  // Called after the wait that retires the MMAs which read `regs` (nothing to keep here).
  __device__ __forceinline__ static void hold(StageRegs&) {}

  // Issues the stage's K block for kPartN tile columns, from B row `b_row` of the stage on, into
  // `r`, adding to it when `accumulate`, else overwriting it.
  template <class T, int kPartN>
  __device__ __forceinline__ static void mma(const typename T::SharedStorage& ss, int stage, StageRegs,
                                             int consumer_wg, int b_row, float (&r)[kPartN / 2], bool accumulate) {
    using Op = hopper::WgmmaOp<hopper::WgmmaKind::kE4M3, kPartN>;
    constexpr int kWgmmaK = 32;
    constexpr int kSwizzleAtomBytes = 1024;  // 8 rows x 128 bytes
    // Stage 0's descriptors (the same in every K block) moved to the stage: no mask and shift per block.
    constexpr hopper::SmemSwizzle kSwizzle = hopper::SmemSwizzle::k128B;
    const uint64_t desc_a = hopper::buffer_desc<T::kSmemA>(
        hopper::make_smem_desc(ss.a[0] + consumer_wg * 64 * T::kBlockK, 0, kSwizzleAtomBytes, kSwizzle), stage);
    const uint64_t desc_b = hopper::buffer_desc<T::kSmemB>(
        hopper::make_smem_desc(ss.b[0] + b_row * T::kBlockK, 0, kSwizzleAtomBytes, kSwizzle), stage);
#pragma unroll
    for (int ks = 0; ks < T::kBlockK / kWgmmaK; ++ks)
      Op::mma(r, hopper::advance_desc(desc_a, ks * kWgmmaK), hopper::advance_desc(desc_b, ks * kWgmmaK),
              accumulate || ks > 0);
  }
};
using DenseOperands = DenseOperandsT<1>;

}  // namespace lowbit::gemm
