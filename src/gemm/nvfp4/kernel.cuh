// NVFP4 (W4A16) GEMM kernel, dense or grouped (the problem layout is a template parameter): one
// TMA producer warpgroup and two dequantize-and-WGMMA consumer warpgroups with a ring of stages
// between them; grouped CTAs are persistent (the ring runs on across units, so the next unit's
// first blocks load under this unit's epilogue), dense CTAs take one unit each with the
// deterministic split-K fix-up; transposed coalesced store.
// Reads top to bottom: static checks -> shared-memory budget -> barrier init -> role split ->
// mainloop -> epilogue.
#pragma once

#include <cuda.h>

#include "gemm/core/split_k.cuh"
#include "gemm/nvfp4/epilogue.cuh"
#include "gemm/nvfp4/mainloop.cuh"
#include "gemm/nvfp4/problems.cuh"
#include "gemm/nvfp4/traits.cuh"
#include "hopper/grid_dependency.cuh"
#include "hopper/mbarrier.cuh"
#include "hopper/registers.cuh"
#include "hopper/shared_storage.cuh"
#include "hopper/tma.cuh"

namespace lowbit::nvfp4 {

template <class T, bool kGrouped>
__global__ void __launch_bounds__(T::kThreads, 1)
    nvfp4_gemm_kernel(const __grid_constant__ CUtensorMap tm_act, const Nvfp4KernelParams p) {
  // Static checks.
  static_assert(T::kTokens % 16 == 0 && T::kTokens >= 16 && T::kTokens <= 256, "wgmma N (split-K stores float4)");
  static_assert(kBlockK == 128 && kBlockK / 16 == 8, "eight m64k16 steps per K block");
  // Half-width remainder tiles: grouped 128-token tiles (W5's groups of 40-384 rows pad their
  // last tile; the dense chooser already sizes the tile to M).
  constexpr bool kHalfTiles = kGrouped && T::kTokens == 128;
  static_assert(!(kGrouped && T::kEpiInRing), "a persistent CTA cannot stage its tile in the ring");

  // Shared-memory budget.
  static_assert(T::kSmemBytes <= kSm90MaxSmemPerBlock, "stages + epilogue tile exceed sm_90 shared memory");
  static_assert(128 * (168 - T::kProducerRegs) + 1024 >= 256 * (T::kConsumerRegs - 168), "setmaxnreg budget");

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 900)
  extern __shared__ uint8_t smem_raw[];
  auto& ss = hopper::aligned_shared_storage<typename T::SharedStorage>(smem_raw);
  const int warpgroup = threadIdx.x / 128;

  // Barrier init: each of the 8 consumer warps releases a stage once per phase.
  if (threadIdx.x == 0) {
    ss.bars.init(8);
    hopper::mbarrier_init_fence();
    if constexpr (!kGrouped) hopper::tma_prefetch_descriptor(&tm_act);
  }
  __syncthreads();
  // Grouped (launched with PDL): the tile offsets, activation maps and staged activations are
  // the previous kernels' output.
  if constexpr (kGrouped) hopper::grid_dependency_wait();
  // Each role builds its own walk after setmaxnreg (values live across it were spilled).
  auto make_problems = [&](bool issues_tma) {
    if constexpr (kGrouped) {
      return GroupedProblems<T::kTokens>{p, issues_tma};
    } else {
      // Only the producer takes the map's address.
      return DenseProblems{p, issues_tma ? &tm_act : nullptr};
    }
  };

  // Role split. Grouped: persistent CTAs stride over the units. Dense: one unit per CTA (the
  // hardware hands a finished SM the next CTA). Inside a unit loop, the split-K fix-up's vote (an
  // asm result, divergent to the compiler) cost the WGMMA descriptors their uniform registers
  // (R2UR before every WGMMA, 12% slower at M = 16), and a persistent dense grid was no faster
  // anyway (docs/perf.md W4 v3).
  const int first_unit = blockIdx.x;
  const int stride = kGrouped ? static_cast<int>(gridDim.x) : 1;  // dense: units [first_unit, first_unit + 1)
  if (warpgroup == 0) {
    hopper::warpgroup_reg_dealloc<T::kProducerRegs>();
    if (threadIdx.x == 0) {
      auto problems = make_problems(true);
      const int num_units = kGrouped ? problems.num_units() : first_unit + 1;
      hopper::RingPosition<T::kStages> pos;
      for (int u = first_unit; u < num_units; u += stride) nvfp4_produce<T>(ss, problems.resolve(u), pos);
    }
  } else {
    hopper::warpgroup_reg_alloc<T::kConsumerRegs>();
    const int consumer_wg = warpgroup - 1;
    auto problems = make_problems(false);
    const int num_units = kGrouped ? problems.num_units() : first_unit + 1;
    Nvfp4Consumer<T> consumer{ss, consumer_wg, {}};
    float acc[T::kTokens / 2];
    for (int u = first_unit; u < num_units; u += stride) {
      // Mainloop. A grouped 128-token tile with at most 64 rows left in its group (a group's
      // last tile) issues half-width MMAs: the rows past M would be zeros. The width is chosen
      // per unit, around the whole K loop (a branch per MMA cost 15%, W4 v4); the rows left are
      // broadcast from lane 0 so the branch is uniform to the compiler.
      const Nvfp4UnitView mv = problems.resolve(u);
      if constexpr (kHalfTiles) {
        const int rows_left = __shfl_sync(0xffffffffu, mv.m - mv.w.m_tile * T::kTokens, 0);
        if (rows_left <= T::kTokens / 2) {
          // Its own accumulator: one register block shared by both widths made ptxas serialize
          // every wgmma (C7511, insufficient registers).
          float half[T::kTokens / 4];
          consumer.template run<T::kTokens / 2>(mv.w, half);
#pragma unroll
          for (int i = 0; i < T::kTokens / 2; ++i) acc[i] = i < T::kTokens / 4 ? half[i] : 0.0f;
        } else {
          consumer.run(mv.w, acc);
        }
      } else {
        consumer.run(mv.w, acc);
      }
      // Epilogue (after the split-K fix-up when K is split). The unit is resolved again rather
      // than kept live across the mainloop, where the registers are taken.
      const Nvfp4UnitView v = problems.resolve(u);
      if (!kGrouped && p.splits > 1) {
        gemm::WorkUnit wu{};
        wu.tile = v.w.tile;
        wu.split = v.w.split;
        if (!gemm::split_k_fixup(acc, wu, p.splits, p.partials, p.tile_counters, static_cast<int>(threadIdx.x) - 128,
                                 256))
          return;  // dense: this CTA's only unit
      }
      nvfp4_store_tile<T>(ss, v, consumer_wg, acc);
    }
  }
#endif
}

}  // namespace lowbit::nvfp4
