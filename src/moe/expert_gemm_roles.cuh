// Pieces both expert GEMM kernels (moe/expert_gemm_kernel.cuh: sorted rows; moe/expert_gemm_tiny.cuh:
// routing in the kernel) run the same way: the barrier init and the consumer warpgroups (for
// each of the CTA's units, the FP8 mainloop with per-token scale promotion, then the scatter).
// The kernels differ in how units resolve (Tiles) and where a tile's rows go (RowSource).
#pragma once

#include <cuda.h>

#include <type_traits>

#include "gemm/core/mainloop.cuh"
#include "hopper/grid_dependency.cuh"
#include "hopper/mbarrier.cuh"
#include "hopper/registers.cuh"
#include "hopper/tma.cuh"
#include "moe/expert_gemm_mainloop.cuh"
#include "moe/scatter_epilogue.cuh"
#include "moe/workspace.h"

namespace lowbit::moe {

// Each of the 8 consumer warps releases a stage once per phase.
template <class T>
__device__ __forceinline__ void init_expert_gemm(typename T::SharedStorage& ss, const CUtensorMap* tm_w,
                                                 const CUtensorMap* tm_x) {
  if (threadIdx.x == 0) {
    ss.bars.init(8);
    hopper::mbarrier_init_fence();
    hopper::tma_prefetch_descriptor(tm_w);
    hopper::tma_prefetch_descriptor(tm_x);
  }
}

template <class T, class Tiles, class RowSource>
__device__ __forceinline__ void consume_units(typename T::SharedStorage& ss, int consumer_wg, const MoeParams& p,
                                              const Tiles& tiles, int num_units, const RowSource& rows) {
  hopper::warpgroup_reg_alloc<T::kConsumerRegs>();
  hopper::RingPosition<T::kStages> pos;
  // Swap-AB: a token's X scale per accumulator column.
  using Promotion = TokenScalePromotion<T>;
  Promotion promotion{&ss, nullptr, 2 * static_cast<int>(threadIdx.x % 4)};
  gemm::Consumer<T, Promotion> consumer{ss, consumer_wg, pos, promotion};
  const ScatterEpilogue<T> epilogue;
  float acc[T::kBlockN / 2];
  for (int u = blockIdx.x; u < num_units; u += gridDim.x) {
    // Mainloop.
    {
      const ExpertUnit v = tiles.resolve(u);
      consumer.promotion.sfb_row = p.w_scales + (static_cast<int64_t>(v.expert) * p.nblocks + v.nb) * p.kblocks;
      gemm::WorkUnit w{};
      w.kb_begin = v.kb_begin;
      w.kb_end = v.kb_end;
      consumer.run(w, acc);
    }
    // Epilogue (the unit is resolved again rather than kept live across the mainloop). The
    // scatter adds into Y, which the kernel before this one prepared: wait for it (returns at
    // once where the kernel already waited).
    hopper::grid_dependency_wait();
    epilogue.store(ss, consumer_wg, tiles.resolve(u), p, acc, rows);
  }
}

}  // namespace lowbit::moe
