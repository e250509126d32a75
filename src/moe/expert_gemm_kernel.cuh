// MoE expert GEMM kernel: persistent, warp-specialized (one TMA producer warpgroup, two WGMMA
// consumer warpgroups), swap-AB block-scaled FP8 over the tiles of the experts that received
// tokens, weighted scatter fused into the epilogue.
// Reads top to bottom: static checks -> shared-memory budget -> barrier init -> role split ->
// mainloop -> epilogue.
#pragma once

#include <cuda.h>

#include "gemm/blockscaled/mainloop.cuh"
#include "gemm/core/mainloop.cuh"
#include "hopper/grid_dependency.cuh"
#include "hopper/mbarrier.cuh"
#include "hopper/registers.cuh"
#include "hopper/shared_storage.cuh"
#include "hopper/tma.cuh"
#include "moe/expert_gemm_mainloop.cuh"
#include "moe/expert_gemm_roles.cuh"
#include "moe/expert_gemm_traits.cuh"
#include "moe/expert_tiles.cuh"
#include "moe/scatter_epilogue.cuh"
#include "moe/workspace.h"

namespace lowbit::moe {

template <class T>
__global__ void __launch_bounds__(T::kThreads, 1)
    expert_gemm_kernel(const __grid_constant__ CUtensorMap tm_w, const __grid_constant__ CUtensorMap tm_x,
                       const MoeParams p) {
  // Static checks.
  static_assert(T::kBlockM == 128 && T::kBlockK == 128, "one W scale (128 x 128) per tile per K block");
  static_assert(T::kBlockN % 16 == 0 && T::kBlockN >= 16 && T::kBlockN <= 128, "token tile of 16..128");
  static_assert(T::kBlockM * T::kBlockK == T::kSmemA && T::kTokens * T::kBlockK == T::kSmemB,
                "the X box (token_tile rows) fills the tokens' side of the stage");
  static_assert(T::kSmemB % 1024 == 0, "stages keep the 1024-byte swizzle alignment");

  // Shared-memory budget.
  static_assert(T::kSmemBytes <= gemm::kSm90MaxSmemPerBlock, "stages + output tile exceed sm_90 shared memory");

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 900)
  extern __shared__ uint8_t smem_raw[];
  auto& ss = hopper::aligned_shared_storage<typename T::SharedStorage>(smem_raw);
  const int warpgroup = threadIdx.x / 128;

  // Barrier init. Launched with
  // PDL, this much runs under the gather stage's tail; the experts' tile offsets (which the
  // layout stage wrote) come into shared memory only after the wait, with the counts and
  // segment offsets, so resolving a unit costs no global round trip.
  hopper::launch_dependents();
  init_expert_gemm<T>(ss, &tm_w, &tm_x);
  hopper::grid_dependency_wait();
  for (int i = threadIdx.x; i <= p.experts; i += blockDim.x) {
    ss.tile_start[i] = p.tile_start[i];
    if (i < p.experts) {
      ss.counts[i] = p.counts[i];
      ss.offsets[i] = p.offsets[i];
    }
  }
  __syncthreads();
  const ExpertTiles tiles{p, gemm::GroupedTileSchedule{ss.tile_start, p.experts}, ss.counts, ss.offsets};
  const int num_units = tiles.num_units();

  // Role split.
  if (warpgroup == 0) {
    hopper::warpgroup_reg_dealloc<T::kProducerRegs>();
    if (threadIdx.x == 0) {
      hopper::RingPosition<T::kStages> pos;
      for (int u = blockIdx.x; u < num_units; u += gridDim.x) {
        const ExpertUnit v = tiles.resolve(u);
        // K slices of 128 bytes from 128 rows 2 KB+ apart make scattered DRAM reads; when the
        // unit covers all of K its tile is one contiguous block, asked of L2 whole first.
        if (p.tile_prefetch && v.kb_begin == 0 && v.kb_end == p.kblocks) {
          const int rows = min(T::kBlockM, p.experts * p.n - v.w_row0);
          hopper::bulk_prefetch_l2(p.w + static_cast<int64_t>(v.w_row0) * p.k, static_cast<uint32_t>(rows * p.k));
        }
        // Only the tile's real rows' scales (a multiple of 4 stays inside the padded segment).
        const uint32_t scale_bytes = static_cast<uint32_t>((v.rows + 3) / 4) * 16u;
        const blockscaled::ScaleStageLoad<T> scales{&ss, p.x_scales + v.x_row0, p.rows, scale_bytes};
        const uint32_t stage_bytes = static_cast<uint32_t>(T::kSmemA + T::kSmemB) + scale_bytes;
        gemm::produce_rows<T>(ss, &tm_w, &tm_x, v.w_row0, v.x_row0, v.kb_begin, v.kb_end, stage_bytes, pos, scales);
      }
    }
  } else {
    consume_units<T>(ss, warpgroup - 1, p, tiles, num_units, SortedRows{p});
  }
#endif
}

}  // namespace lowbit::moe
