// NVFP4 (W4A16) GEMM kernel: one work unit (128 weight rows x kTokens tokens x a K range) per
// CTA; one TMA producer warpgroup, two dequantize-and-WGMMA consumer warpgroups, a ring of
// stages between them, deterministic split-K fix-up, transposed coalesced store.
// Reads top to bottom: static checks -> shared-memory budget -> barrier init -> role split ->
// mainloop -> epilogue.
#pragma once

#include <cuda.h>

#include "gemm/nvfp4/epilogue.cuh"
#include "gemm/nvfp4/mainloop.cuh"
#include "gemm/nvfp4/traits.cuh"
#include "gemm/split_k.cuh"
#include "gemm/tile_scheduler.cuh"
#include "hopper/mbarrier.cuh"
#include "hopper/registers.cuh"
#include "hopper/shared_storage.cuh"
#include "hopper/tma.cuh"

namespace lowbit::nvfp4 {

template <class T>
__global__ void __launch_bounds__(T::kThreads, 1)
    nvfp4_gemm_kernel(const __grid_constant__ CUtensorMap tm_act, const Nvfp4KernelParams p) {
  // Static checks.
  static_assert(T::kTokens % 16 == 0 && T::kTokens >= 16 && T::kTokens <= 256, "wgmma N (split-K stores float4)");
  static_assert(kBlockK == 128 && kBlockK / 16 == 8, "eight m64k16 steps per K block");

  // Shared-memory budget.
  static_assert(T::kSmemBytes <= kSm90MaxSmemPerBlock, "stages + epilogue tile exceed sm_90 shared memory");
  static_assert(128 * (168 - T::kProducerRegs) + 1024 >= 256 * (T::kConsumerRegs - 168), "setmaxnreg budget");

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 900)
  extern __shared__ uint8_t smem_raw[];
  auto& ss = hopper::aligned_shared_storage<typename T::SharedStorage>(smem_raw);
  const int warpgroup = threadIdx.x / 128;
  const Nvfp4Unit w = nvfp4_unit(p, blockIdx.x);

  // Barrier init: each of the 8 consumer warps releases a stage once per phase.
  if (threadIdx.x == 0) {
    ss.bars.init(8);
    hopper::mbarrier_init_fence();
    hopper::tma_prefetch_descriptor(&tm_act);
  }
  __syncthreads();

  // Role split.
  if (warpgroup == 0) {
    hopper::warpgroup_reg_dealloc<T::kProducerRegs>();
    if (threadIdx.x == 0) nvfp4_produce<T>(ss, &tm_act, p, w);
  } else {
    hopper::warpgroup_reg_alloc<T::kConsumerRegs>();
    const int consumer_wg = warpgroup - 1;
    // Mainloop.
    float acc[T::kTokens / 2];
    Nvfp4Consumer<T> consumer{ss, consumer_wg, {}};
    consumer.run(w, acc);
    // Epilogue (after the split-K fix-up when K is split).
    if (p.splits > 1) {
      gemm::WorkUnit wu{};
      wu.tile = w.tile;
      wu.split = w.split;
      if (!gemm::split_k_fixup(acc, wu, p.splits, p.partials, p.tile_counters, static_cast<int>(threadIdx.x) - 128,
                               256))
        return;
    }
    nvfp4_store_tile<T>(ss, p, w, consumer_wg, acc);
  }
#endif
}

}  // namespace lowbit::nvfp4
