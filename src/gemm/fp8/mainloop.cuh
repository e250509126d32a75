// FP8 GEMM mainloop: the TMA producer and the WGMMA consumer for one work unit.
// Separate from the epilogue and the scheduler so that a new operand path (sparse, dequant,
// block scales) replaces this file only.
#pragma once

#include <cuda.h>

#include "gemm/tile_scheduler.cuh"
#include "hopper/mbarrier.cuh"
#include "hopper/named_barrier.cuh"
#include "hopper/tma.cuh"
#include "hopper/wgmma.cuh"

namespace lowbit::fp8 {

// One elected thread streams A[128 x 128] and B[BN x 128] tiles of each K block into the
// ring; TMA zero-fills rows and columns past the tensor's edge, so partial tiles need no
// special case here.
template <class T>
__device__ __forceinline__ void produce_unit(typename T::SharedStorage& ss, const CUtensorMap* tm_a,
                                             const CUtensorMap* tm_b, const gemm::WorkUnit& w,
                                             hopper::RingPosition<T::kStages>& pos) {
  for (int kb = w.kb_begin; kb < w.kb_end; ++kb) {
    ss.bars.producer_acquire(pos);
    uint64_t* full = &ss.bars.full[pos.stage];
    hopper::mbarrier_arrive_expect_tx(full, T::kStageTxBytes);
    hopper::tma_load_2d(ss.a[pos.stage], tm_a, full, kb * T::kBlockK, w.m_block * T::kBlockM);
    hopper::tma_load_2d(ss.b[pos.stage], tm_b, full, kb * T::kBlockK, w.n_block * T::kBlockN);
    pos.advance();
  }
}

// The two consumer warpgroups take turns issuing their MMAs for each K block (0, 1, 0, 1, ...).
// Without the turn-taking both issue at once, the tensor cores interleave the two groups, both
// finish together and both then sit in their promotion adds with the tensor cores idle; with it,
// one warpgroup's adds overlap the other's MMAs.
struct MmaTurn {
  int consumer_wg;
  bool first = true;
  __device__ __forceinline__ void before_issue() {
    if (consumer_wg == 1) {
      hopper::named_barrier_sync(hopper::NamedBarrier::kMmaIssuedWg0, 256);
    } else if (!first) {
      hopper::named_barrier_sync(hopper::NamedBarrier::kMmaIssuedWg1, 256);
    }
    first = false;
  }
  __device__ __forceinline__ void after_issue() {
    hopper::named_barrier_arrive(
        consumer_wg == 0 ? hopper::NamedBarrier::kMmaIssuedWg0 : hopper::NamedBarrier::kMmaIssuedWg1, 256);
  }
  // Warpgroup 1's last signal has no later turn of warpgroup 0 to consume it; take it so the
  // barrier ends the kernel balanced.
  __device__ __forceinline__ void finish() {
    if (consumer_wg == 0 && !first) hopper::named_barrier_sync(hopper::NamedBarrier::kMmaIssuedWg1, 256);
  }
};

// One consumer warpgroup computes its 64 x BN slice of the unit. The tensor cores' FP8
// accumulator keeps fewer mantissa bits than FP32, so each K block (4 wgmma k-steps) goes into
// `partial` and is added to the FP32 `acc` in registers ("promotion"); the other consumer
// warpgroup keeps the tensor cores busy while this one adds (see MmaTurn).
template <class T>
__device__ __forceinline__ void consume_unit(typename T::SharedStorage& ss, int consumer_wg,
                                             const gemm::WorkUnit& w,
                                             hopper::RingPosition<T::kStages>& pos, MmaTurn& turn,
                                             float (&acc)[T::kBlockN / 2]) {
  using Op = hopper::WgmmaOp<hopper::WgmmaKind::kE4M3, T::kBlockN>;
  constexpr int kSwizzleAtomBytes = 1024;  // 8 rows x 128 bytes
  float partial[T::kBlockN / 2];
  const int lane = threadIdx.x % 32;

#pragma unroll
  for (int i = 0; i < T::kBlockN / 2; ++i) acc[i] = 0.0f;

  for (int kb = w.kb_begin; kb < w.kb_end; ++kb) {
    ss.bars.consumer_wait(pos);
    const uint64_t desc_a = hopper::make_smem_desc(ss.a[pos.stage] + consumer_wg * 64 * T::kBlockK, 0,
                                                   kSwizzleAtomBytes, hopper::SmemSwizzle::k128B);
    const uint64_t desc_b =
        hopper::make_smem_desc(ss.b[pos.stage], 0, kSwizzleAtomBytes, hopper::SmemSwizzle::k128B);
    hopper::fence_operands(partial);
    turn.before_issue();
    hopper::wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < T::kBlockK / T::kWgmmaK; ++ks) {
      Op::mma(partial, hopper::advance_desc(desc_a, ks * T::kWgmmaK),
              hopper::advance_desc(desc_b, ks * T::kWgmmaK), ks > 0);
    }
    hopper::wgmma_commit_group();
    turn.after_issue();
    hopper::wgmma_wait_group<0>();
    hopper::fence_operands(partial);
    // The stage's bytes are no longer read: hand it back before the promotion adds.
    if (lane == 0) ss.bars.consumer_release(pos.stage);
#pragma unroll
    for (int i = 0; i < T::kBlockN / 2; ++i) acc[i] += partial[i];
    pos.advance();
  }
}

}  // namespace lowbit::fp8
