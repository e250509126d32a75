// The grouped block-scaled layouts on the FP8 core (the core's problems policy, T::Problems:
// gemm/fp8/problems.cuh): G problems described in device memory, tensor maps patched per group on
// the device by the preparation kernel (gemm/blockscaled/grouped_prepare.cuh), tiles of all groups
// walked as one sequence (tile_start[g]: the first tile of group g, as gemm::GroupedTileSchedule
// lays them out). For unit u: which tile, of which operands,
// with which scales.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "gemm/blockscaled/mainloop.cuh"
#include "gemm/fp8/traits.cuh"
#include "gemm/tile_scheduler.cuh"
#include "hopper/tma.cuh"
#include "lowbit/blockscaled.h"

namespace lowbit::blockscaled {

__device__ __forceinline__ int blocks_of(int x, int block) { return (x + block - 1) / block; }

// A grouped unit: the tile (its K range is the whole of its group's K), and what its group adds:
// the group (whose maps are A, B, D at p.groups.maps + 3 * group), its size, and the scales of the
// tile's rows and columns (read by the producer only; unused, the consumers never load them).
struct GroupedUnit : gemm::WorkUnit {
  int group;
  int m, n;
  const float* sfa;  // the A scales of the tile's first row
  int64_t sfa_ld;
  const float* sfb;     // the B scales of the tile's first 128 columns (a row of sfb)
  int sfb_part_stride;  // to the row of its next 128 columns; 0 when those lie past N
};

// Each role keeps its own cursor: the group's size is re-read only when the walk enters a new
// group, and a thread that loads or stores through a group's tensor maps acquires them first (the
// preparation kernel wrote them through the generic proxy). The core places the next unit while
// no MMA is in flight, so the group change's branch and loads cost the tensor cores nothing. The
// walk holds no pointer: the tile offsets are read through the kernel's parameters at each lookup
// (from global memory, cached in L1; the search starts at the current group), and the maps are
// found from the group: with a 64-bit table pointer and map pointer kept live, the 128 x 256
// consumers and the 40-register producer spilled. The offsets are not copied to shared memory:
// read through the kernel's shared storage, the consumers' K loop left the uniform datapath (its
// stage and descriptor arithmetic in per-thread registers, twice the R2UR) and the grouped kernel
// ran 9-13% behind the dense one on the same problem (docs/perf.md block-scaled "Grouped v2").
template <class T>
struct GroupedProblems {
  using Unit = GroupedUnit;
  bool acquire_maps;
  int group = -1;
  int group_m = 0, group_n = 0, k_blocks = 0;  // the current group's size

  __device__ __forceinline__ static int tile_start(const fp8::Fp8KernelParams& p, int g) {
    return __ldg(p.groups.tile_start + g);
  }
  // The unit count is the device's (the preparation kernel's tile_start[groups]): the grid is
  // every CTA that fits, and those past the last unit exit.
  __device__ __forceinline__ static int num_units(const fp8::Fp8KernelParams& p) {
    return tile_start(p, p.groups.count);
  }
  __device__ __forceinline__ static GroupedProblems make(bool issues_tma) {
    return GroupedProblems{issues_tma};
  }

  // Unit u (u never decreases along a role's walk): the last group g with tile_start[g] <= u, by
  // binary search from the current group (empty groups share their start with the next group and
  // are never returned).
  __device__ __forceinline__ Unit unit(int u, const fp8::Fp8KernelParams& p) {
    int lo = group < 0 ? 0 : group, hi = p.groups.count - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (tile_start(p, mid) <= u) lo = mid;
      else hi = mid - 1;
    }
    const int g = lo;
    const Fp8GroupedProblem& d = static_cast<const Fp8GroupedProblem*>(p.groups.descriptors)[g];
    if (g != group) {
      group = g;
      group_m = d.m;
      group_n = d.n;
      k_blocks = blocks_of(d.k, T::kBlockK);
      if (acquire_maps) {
        const CUtensorMap* maps = p.groups.maps + 3 * g;
        hopper::tensor_map_acquire(maps + 0);
        hopper::tensor_map_acquire(maps + 1);
        hopper::tensor_map_acquire(maps + 2);
      }
    }
    Unit v;
    v.tile = u;
    v.split = 0;
    v.kb_begin = 0;
    v.kb_end = k_blocks;
    gemm::raster_tile(u - tile_start(p, g), blocks_of(group_m, T::kBlockM), blocks_of(group_n, T::kBlockN),
                      p.sched.group_m,
                      &v.m_block, &v.n_block);
    v.group = g;
    v.m = group_m;
    v.n = group_n;
    v.sfa = d.sfa + static_cast<int64_t>(v.m_block) * T::kBlockM;
    v.sfa_ld = d.sfa_ld;
    const BScaleRows b = tile_b_scale_rows<T::kBlockN>(d.sfb, k_blocks, group_n, v.n_block);
    v.sfb = b.first;
    v.sfb_part_stride = b.part_stride;
    return v;
  }
  // The unit as lane 0 of the warp holds it, for consumers (whole warps). It is read from memory,
  // which the compiler cannot prove warp-uniform: taken as it is, the consumers' K loop (its trip
  // count) and stage arithmetic left the uniform datapath (twice the R2UR per K block pair; docs/
  // perf.md block-scaled "Grouped v2").
  __device__ __forceinline__ static Unit warp_uniform(const Unit& w) {
    Unit v = w;
    v.m_block = __shfl_sync(0xffffffffu, w.m_block, 0);
    v.n_block = __shfl_sync(0xffffffffu, w.n_block, 0);
    v.tile = __shfl_sync(0xffffffffu, w.tile, 0);
    v.kb_end = __shfl_sync(0xffffffffu, w.kb_end, 0);
    v.group = __shfl_sync(0xffffffffu, w.group, 0);
    v.m = __shfl_sync(0xffffffffu, w.m, 0);
    v.n = __shfl_sync(0xffffffffu, w.n, 0);
    return v;
  }
  // The group's maps and size (the kernel's own maps are templates, never used).
  __device__ __forceinline__ static const CUtensorMap* a_map(const Unit& w, const fp8::Fp8KernelParams& p) {
    return p.groups.maps + 3 * w.group + 0;
  }
  __device__ __forceinline__ static const CUtensorMap* b_map(const Unit& w, const fp8::Fp8KernelParams& p) {
    return p.groups.maps + 3 * w.group + 1;
  }
  __device__ __forceinline__ static const CUtensorMap* d_map(const Unit& w, const fp8::Fp8KernelParams& p) {
    return p.groups.maps + 3 * w.group + 2;
  }
  __device__ __forceinline__ static int m(const Unit& w, const fp8::Fp8KernelParams&) { return w.m; }
  __device__ __forceinline__ static int n(const Unit& w, const fp8::Fp8KernelParams&) { return w.n; }
};

}  // namespace lowbit::blockscaled
