// Grouped block-scaled FP8 GEMM kernel (the dense GEMM runs on the FP8 core:
// gemm/blockscaled/core_traits.cuh; this one moves there next, issue 39): persistent, warp-specialized (one TMA producer warpgroup, two WGMMA consumer warpgroups), a
// ring of stages carrying A, B and the A scales, FP32 promotion with the block scales, TMA-store
// epilogue (the FP8 GEMM's).
// Reads top to bottom: static checks -> shared-memory budget -> barrier init -> role split ->
// mainloop -> epilogue.
#pragma once

#include <cuda.h>

#include "gemm/blockscaled/mainloop.cuh"
#include "gemm/blockscaled/problems.cuh"
#include "gemm/blockscaled/traits.cuh"
#include "gemm/fp8/epilogue.cuh"
#include "gemm/fp8/mainloop.cuh"
#include "hopper/cluster.cuh"
#include "hopper/mbarrier.cuh"
#include "hopper/registers.cuh"
#include "hopper/shared_storage.cuh"
#include "hopper/tma.cuh"

namespace lowbit::blockscaled {

template <class T>
__global__ void __launch_bounds__(T::kThreads, 1)
    blockscaled_gemm_kernel(const __grid_constant__ CUtensorMap tm_a, const __grid_constant__ CUtensorMap tm_b,
                            const __grid_constant__ CUtensorMap tm_d, const BlockScaledParams p) {
  // Static checks.
  static_assert(T::kBlockN % 128 == 0 && T::kBlockK == 128, "whole B scale blocks (128 x 128) per tile and K block");
  static_assert(T::kBlockM == 128 && T::kConsumerWarpgroups == 2, "two consumer warpgroups of 64 rows");
  static_assert(T::kSmemA % 1024 == 0 && T::kSmemB % 1024 == 0, "stages keep the 1024-byte swizzle alignment");

  // Shared-memory budget.
  static_assert(T::kSmemBytes <= fp8::kSm90MaxSmemPerBlock, "stages + epilogue staging exceed sm_90 shared memory");

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 900)
  extern __shared__ uint8_t smem_raw[];
  // Single CTAs keep the storage address pinned in a register, as the plain FP8 kernels do
  // (hopper::pinned_shared_storage); pinned, the multicast pairs spilled (FP32-out grouped).
  constexpr bool kPin = T::kClusterM == 1;
  auto& ss = kPin ? hopper::pinned_shared_storage<typename T::SharedStorage>(smem_raw)
                  : hopper::aligned_shared_storage<typename T::SharedStorage>(smem_raw);
  const int warpgroup = threadIdx.x / 128;

  // Barrier init: each of the 8 consumer warps of this CTA releases a stage once per phase; in a
  // cluster each peer's relay thread then says its copy is free too (peers multicast into it).
  // Grouped: the tile offsets come into shared memory for the per-unit group lookup.
  if (threadIdx.x == 0) {
    ss.bars.init(8, T::kClusterM - 1, fp8::StageFillArrivals<T>::value);
    hopper::mbarrier_init_fence();
  }
  const bool table_in_smem = p.groups + 1 <= kSmemGroupTable + 1;
  if (table_in_smem)
    for (int i = threadIdx.x; i <= p.groups; i += blockDim.x) ss.tile_start[i] = p.tile_start[i];
  // Peers' barriers must be initialized before the first multicast or remote arrival.
  if constexpr (T::kClusterM > 1) hopper::cluster_sync();
  else __syncthreads();
  // Each role computes its own walk after setmaxnreg: values kept live across it were spilled.
  auto cluster_id = [] { return static_cast<int>(blockIdx.x) / T::kClusterM; };
  auto clusters = [] { return static_cast<int>(gridDim.x) / T::kClusterM; };

  auto make_problems = [&](bool issues_tma) {
    const int rank = T::kClusterM > 1 ? static_cast<int>(hopper::cluster_rank()) : 0;
    return GroupedProblems<T::kBlockN>{
        p, gemm::GroupedTileSchedule{table_in_smem ? ss.tile_start : p.tile_start, p.groups}, issues_tma, rank};
  };

  // Role split.
  if (warpgroup == 0) {
    hopper::warpgroup_reg_dealloc<T::kProducerRegs>();
    if (threadIdx.x == 0) {
      auto problems = make_problems(true);
      const int num_units = problems.num_units();
      hopper::RingPosition<T::kStages> pos;
      for (int u = cluster_id(); u < num_units; u += clusters()) {
        const UnitView v = problems.resolve(u);
        const int rows = max(0, min(v.m - v.w.m_block * T::kBlockM, T::kBlockM));
        const uint32_t scale_bytes = static_cast<uint32_t>((rows + 3) / 4) * 16u;
        fp8::produce_unit<T>(ss, v.tm_a, v.tm_b, v.w, static_cast<uint32_t>(T::kSmemA + T::kSmemB) + scale_bytes, pos,
                             ScaleStageLoad<T>{&ss, v.sfa, v.sfa_ld, scale_bytes, v.sfb, v.sfb_part_stride});
      }
    } else if (T::kClusterM > 1 && threadIdx.x == 96) {
      // Relay: hands this CTA's released stages on to the peers (StageBarriers::relay_to_peers).
      auto problems = make_problems(false);
      const int num_units = problems.num_units();
      hopper::RingPosition<T::kStages> pos;
      const uint32_t rank = hopper::cluster_rank();
      for (int u = cluster_id(); u < num_units; u += clusters())
        fp8::relay_unit<T>(ss, problems.resolve(u).w, pos, rank);
    }
  } else {
    hopper::warpgroup_reg_alloc<T::kConsumerRegs>();
    const int consumer_wg = warpgroup - 1;
    const int t = threadIdx.x % 128;
    auto problems = make_problems(t == 0);  // thread 0 of each consumer warpgroup issues its stores
    const int num_units = problems.num_units();
    hopper::RingPosition<T::kStages> pos;
    fp8::Fp8Epilogue<T> epilogue;
    using Promotion = BlockScalePromotion<T>;
    fp8::Consumer<T, Promotion> consumer{ss, consumer_wg, pos,
                                         Promotion{&ss, nullptr, 0, consumer_wg * 64 + (t / 32) * 16 + (t % 32) / 4}};
    float acc[T::kBlockN / 2];
    for (int u = cluster_id(); u < num_units; u += clusters()) {
      // Mainloop.
      consumer.run(problems.resolve(u).w, acc);  // the B scales come with the stages
      // Epilogue. The unit is resolved again (a shared-memory lookup) rather than kept live
      // across the mainloop, where the 232 registers are all taken.
      const UnitView v = problems.resolve(u);
      epilogue.store(ss, consumer_wg, v.tm_d, v.m, v.n, v.w, acc);
    }
    epilogue.drain();
  }
  // No CTA leaves while a peer may still multicast into its shared memory or arrive on its
  // barriers.
  if constexpr (T::kClusterM > 1) hopper::cluster_sync();
#endif
}

}  // namespace lowbit::blockscaled
