// Stage 2, layout: one block of 1024 threads counts the tokens of every expert (shared-memory
// atomics), then two block-wide scans (one expert per thread) give each expert's segment in the
// sorted buffers (padded to 4 rows) and its first GEMM tile. Bad caller ids are counted nowhere
// and reported in the status word. Also resets the gather stage's slot counters.
#pragma once

#include <climits>
#include <cstdint>
#include <cub/block/block_scan.cuh>

#include "hopper/grid_dependency.cuh"
#include "moe/workspace.h"

namespace lowbit::moe {

constexpr int kLayoutThreads = kMaxExperts;

// Tiles of one expert with `count` tokens; the GEMM's unit decode (moe/expert_tiles.cuh) walks
// the same product.
__host__ __device__ __forceinline__ int expert_tiles(int count, int token_tile, int nblocks, int splits) {
  return (count + token_tile - 1) / token_tile * nblocks * splits;
}

__global__ void __launch_bounds__(kLayoutThreads) layout_kernel(MoeParams p) {
  hopper::launch_dependents();
  hopper::grid_dependency_wait();
  using Scan = cub::BlockScan<int, kLayoutThreads>;
  __shared__ typename Scan::TempStorage scan_tmp;
  __shared__ int s_count[kMaxExperts];
  __shared__ int first_bad;
  const int tid = static_cast<int>(threadIdx.x);
  if (tid < p.experts) s_count[tid] = 0;
  if (tid == 0) first_bad = INT_MAX;
  __syncthreads();
  // kCountBatch loads in flight per thread before their atomics: one load, then its atomic, per
  // iteration made the loop a chain of global round trips (56 us at M = 8192, 65536 pairs, under
  // ncu; docs/perf.md W6 v4).
  constexpr int kCountBatch = 16;
  const int pairs = p.m * p.top_k;
  for (int base = tid; base < pairs; base += kLayoutThreads * kCountBatch) {
    int ids[kCountBatch];
#pragma unroll
    for (int j = 0; j < kCountBatch; ++j) {
      const int i = base + j * kLayoutThreads;
      ids[j] = i < pairs ? p.ids[i] : 0;
    }
#pragma unroll
    for (int j = 0; j < kCountBatch; ++j) {
      const int i = base + j * kLayoutThreads;
      if (i >= pairs) break;
      if (static_cast<unsigned>(ids[j]) >= static_cast<unsigned>(p.experts)) atomicMin(&first_bad, i);
      else atomicAdd(&s_count[ids[j]], 1);
    }
  }
  __syncthreads();
  const int count = tid < p.experts ? s_count[tid] : 0;
  int seg_start = 0, seg_total = 0, tile0 = 0, tile_total = 0;
  Scan(scan_tmp).ExclusiveSum((count + 3) / 4 * 4, seg_start, seg_total);
  __syncthreads();
  Scan(scan_tmp).ExclusiveSum(expert_tiles(count, p.token_tile, p.unit_nblocks, p.splits), tile0, tile_total);
  if (tid < p.experts) {
    p.counts[tid] = count;
    p.offsets[tid] = seg_start;
    p.tile_start[tid] = tile0;
    p.cursor[tid] = 0;
  }
  if (tid == 0) {
    p.offsets[p.experts] = seg_total;
    p.tile_start[p.experts] = tile_total;
    // The token-rows GEMM's last partial wave (gemm::tail_plan; tail_grid 0: whole tiles only).
    const gemm::TailPlan plan = gemm::tail_plan(tile_total, p.tail_grid, p.kblocks, p.tail_min_part);
    p.tile_start[p.experts + gemm::kTailPlanWhole] = plan.whole;
    p.tile_start[p.experts + gemm::kTailPlanParts] = plan.parts;
    p.tile_start[p.experts + gemm::kTailPlanUnits] = plan.units;
    p.status[0] = first_bad == INT_MAX ? kMoeOk : kMoeBadExpertId;
    p.status[1] = first_bad == INT_MAX ? -1 : first_bad;
  }
}

}  // namespace lowbit::moe
