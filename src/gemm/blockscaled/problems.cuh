// Where a grouped block-scaled unit's operands come from: G problems described in device memory,
// tensor maps patched per group on the device, tiles of all groups walked as one sequence
// (gemm::GroupedTileSchedule): for unit u, which tile, of which operands, with which scales.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "gemm/blockscaled/mainloop.cuh"
#include "gemm/tile_scheduler.cuh"
#include "hopper/tma.cuh"
#include "lowbit/blockscaled.h"

namespace lowbit::blockscaled {

struct BlockScaledParams {
  int cluster_m;  // CTAs per cluster along M (= the kernel's T::kClusterM); units count cluster tiles
  int group_m;  // raster band height
  const Fp8GroupedProblem* problems;
  int groups;
  const int* tile_start;    // [groups + 1] in the workspace
  const CUtensorMap* maps;  // [groups][3] (A, B, D) in the workspace
};

struct UnitView {
  gemm::WorkUnit w;
  const CUtensorMap* tm_a;
  const CUtensorMap* tm_b;
  const CUtensorMap* tm_d;
  int m, n, k_blocks;
  const float* sfa;  // the tile's first row
  int64_t sfa_ld;
  const float* sfb;     // the B scales of the tile's first 128 columns (a row of sfb)
  int sfb_part_stride;  // to the row of its next 128 columns; 0 when those lie past N
};

__device__ __forceinline__ int blocks_of(int x, int block) { return (x + block - 1) / block; }

// Each role keeps its own cursor: the group's descriptor is re-read only when the walk enters
// a new group, and each thread that uses a group's tensor maps acquires them first (they were
// written by the preparation kernel through the generic proxy).
template <int kBlockN>
struct GroupedProblems {
  const BlockScaledParams& p;
  gemm::GroupedTileSchedule sched;  // tile_start in shared memory when it fits; counts cluster units
  bool acquire_maps;                // this thread issues TMA through the maps
  int rank;                         // in the cluster
  int group = -1;
  // What the walk needs of the current group's descriptor (its operand pointers live in the
  // tensor maps); kept small, it stays in registers across the consumers' mainloop.
  struct Cached {
    int m, n, k;
    const float* sfa;
    int64_t sfa_ld;
    const float* sfb;
  } prob{};

  __device__ __forceinline__ int num_units() const { return sched.num_units(); }
  __device__ __forceinline__ UnitView resolve(int u) {
    const int g = sched.group_of(u);
    const CUtensorMap* maps = p.maps + 3 * g;
    if (g != group) {
      group = g;
      const Fp8GroupedProblem& d = p.problems[g];
      prob = Cached{d.m, d.n, d.k, d.sfa, d.sfa_ld, d.sfb};
      if (acquire_maps) {
        hopper::tensor_map_acquire(maps + 0);
        hopper::tensor_map_acquire(maps + 1);
        hopper::tensor_map_acquire(maps + 2);
      }
    }
    UnitView v;
    v.w.tile = u;
    v.w.split = 0;
    v.k_blocks = blocks_of(prob.k, 128);
    v.w.kb_begin = 0;
    v.w.kb_end = v.k_blocks;
    gemm::raster_tile(u - sched.tile_start[g], blocks_of(prob.m, 128 * p.cluster_m), blocks_of(prob.n, kBlockN),
                      p.group_m, &v.w.m_block, &v.w.n_block);
    v.w.m_block = v.w.m_block * p.cluster_m + rank;
    v.tm_a = maps + 0;
    v.tm_b = maps + 1;
    v.tm_d = maps + 2;
    v.m = prob.m;
    v.n = prob.n;
    v.sfa = prob.sfa + v.w.m_block * 128;
    v.sfa_ld = prob.sfa_ld;
    const BScaleRows b = tile_b_scale_rows<kBlockN>(prob.sfb, v.k_blocks, v.n, v.w.n_block);
    v.sfb = b.first;
    v.sfb_part_stride = b.part_stride;
    return v;
  }
};

}  // namespace lowbit::blockscaled
