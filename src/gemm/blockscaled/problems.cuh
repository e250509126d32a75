// The grouped block-scaled layouts on the GEMM core (the core's problems policy, T::Problems:
// gemm/core/problems.cuh): G problems described in device memory, tensor maps patched per group on
// the device by the preparation kernel (gemm/blockscaled/grouped_prepare.cuh), tiles of all groups
// walked as one sequence (tile_start[g]: the first tile of group g, as gemm::GroupedTileSchedule
// lays them out). For unit u: which tile, of which operands,
// with which scales.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "gemm/blockscaled/mainloop.cuh"
#include "gemm/core/tail_plan.h"
#include "gemm/core/tile_scheduler.cuh"
#include "gemm/core/traits.cuh"
#include "hopper/cp_async.cuh"
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

// The group of unit u: the last group g with tile_start[g] <= u, by binary search from group
// `from` (a role's current group; units never decrease along its walk). Empty groups share their
// start with the next group and are never returned.
__device__ __forceinline__ int group_of_unit(int u, const gemm::KernelParams& p, int from) {
  int lo = from < 0 ? 0 : from, hi = p.groups.count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (__ldg(p.groups.tile_start + mid) <= u) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// A grouped unit as lane 0 of the warp holds it, for consumers (whole warps): the fields they read.
// It is read from memory, which the compiler cannot prove warp-uniform: taken as it is, the
// consumers' K loop (its trip count) and stage arithmetic left the uniform datapath (twice the R2UR
// per K block pair; docs/perf.md block-scaled "Grouped v2").
template <class Unit>
__device__ __forceinline__ Unit grouped_unit_as_lane0(const Unit& w) {
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

// Each role keeps its own cursor: the group's size is re-read only when the walk enters a new
// group, and a thread that loads or stores through a group's tensor maps acquires them first (the
// preparation kernel wrote them through the generic proxy). The core places the next unit while
// no MMA is in flight (a branch with one in flight serializes the wgmmas), so the tensor cores idle
// meanwhile: 840 cycles a consumer unit here against 180 in the dense walk (docs/perf.md
// block-scaled, "where a 128 x 256 unit's cycles go"). The walk holds no pointer: the tile offsets are read through the kernel's parameters at each lookup
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

  __device__ __forceinline__ static int tile_start(const gemm::KernelParams& p, int g) {
    return __ldg(p.groups.tile_start + g);
  }
  // The unit count is the device's (the preparation kernel's tile_start[groups]): the grid is
  // every CTA that fits, and those past the last unit exit.
  __device__ __forceinline__ static int num_units(const gemm::KernelParams& p) {
    return tile_start(p, p.groups.count);
  }
  __device__ __forceinline__ static GroupedProblems make(bool issues_tma) {
    return GroupedProblems{issues_tma};
  }

  // Unit u (u never decreases along a role's walk).
  __device__ __forceinline__ Unit unit(int u, const gemm::KernelParams& p) {
    const int g = group_of_unit(u, p, group);
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
  __device__ __forceinline__ static Unit warp_uniform(const Unit& w) { return grouped_unit_as_lane0(w); }
  // The group's maps and size (the kernel's own maps, the third argument, are templates, never used).
  __device__ __forceinline__ static const CUtensorMap* a_map(const Unit& w, const gemm::KernelParams& p,
                                                             const CUtensorMap*) {
    return p.groups.maps + 3 * w.group + 0;
  }
  __device__ __forceinline__ static const CUtensorMap* b_map(const Unit& w, const gemm::KernelParams& p,
                                                             const CUtensorMap*) {
    return p.groups.maps + 3 * w.group + 1;
  }
  __device__ __forceinline__ static const CUtensorMap* d_map(const Unit& w, const gemm::KernelParams& p,
                                                             const CUtensorMap*) {
    return p.groups.maps + 3 * w.group + 2;
  }
  __device__ __forceinline__ static int m(const Unit& w, const gemm::KernelParams&) { return w.m; }
  __device__ __forceinline__ static int n(const Unit& w, const gemm::KernelParams&) { return w.n; }
};

// A stacked unit: a grouped unit whose operand rows are its group's rows of the one (gathered) A and
// the one B (gemm::unit_b_row reads its B row; a_row0 is its first stacked row, the gather's and the
// row scatter's).
struct StackedUnit : GroupedUnit {
  int a_row0;  // the tile's first row of A (and of its rows in the row scatter)
  int b_row0;  // its first row of B: group * n + the tile's first column
};

// What the producer of a stacked unit gathers (gemm::produce_gathered_rows): its tile rows that lie
// in its group, each from its own source row (KernelParams::gather), with that row's A scale of each
// K block; the rows past the group are zero filled, and so are their scales.
struct StackedGather {
  const uint8_t* a;
  int64_t lda;
  const int* index;  // at the tile's first stacked row
  int index_div;
  int rows;  // tile rows in the group
  const float* sfa;
  int64_t sfa_ld;
  __device__ __forceinline__ int row(int t) const { return t < rows ? __ldg(index + t) / index_div : -1; }
  template <class SharedStorage>
  __device__ __forceinline__ void extras(SharedStorage& ss, int stage, int kb, int t, int src) const {
    hopper::cp_async_4_zfill(&ss.sfa[stage][0][t], sfa + static_cast<int64_t>(kb) * sfa_ld + max(src, 0), src >= 0);
  }
};

// Stacked problems: the groups' rows one after the other in one A (group g owns p.stacked.rows[g]
// rows from p.stacked.row0[g]) and their B matrices stacked in one B ([count * n, k]), all groups of
// one N and K; B's scales as the dense GEMM's. A's rows are gathered (kGathersA): stacked row r is
// row p.gather.index[r] / p.gather.index_div of p.gather.a, so the rows need not be copied into
// group order first. B comes through the kernel's own map (no per-group maps, nothing to prepare).
// A tile's rows past its group are zero filled, computed and never stored, since each output row is
// scattered (gemm/blockscaled/epilogue_scatter.cuh) and only the group's own rows are. The fused
// MoE's expert GEMM over the tokens, in expert order (moe/launch.cu).
template <class T>
struct StackedProblems {
  using Unit = StackedUnit;
  static constexpr bool kGathersA = true;
  int group = -1;
  int group_m = 0, group_row0 = 0;

  // Units: the whole tiles before the last partial wave, then that wave's tiles cut into up to 4 K
  // parts each (gemm::TailPlan, which the fused MoE's layout stage stores after tile_start), whose
  // results the row scatter adds like whole tiles'. Only where it adds (p.scatter.add): a scatter
  // that stores ignores the plan, whatever the layout stage was told.
  __device__ __forceinline__ static int num_units(const gemm::KernelParams& p) {
    return __ldg(p.groups.tile_start + p.groups.count + (p.scatter.add ? gemm::kTailPlanUnits : 0));
  }
  __device__ __forceinline__ static StackedProblems make(bool) { return StackedProblems{}; }

  __device__ __forceinline__ Unit unit(int u, const gemm::KernelParams& p) {
    int kb_begin, kb_end;
    // A storing scatter reads the tile count as `whole`: every unit a whole tile.
    const int* plan = p.groups.tile_start + p.groups.count;
    const int tile = gemm::tail_plan_unit(u, __ldg(plan + (p.scatter.add ? gemm::kTailPlanWhole : 0)),
                                          __ldg(plan + gemm::kTailPlanParts), p.bs.k_blocks, &kb_begin, &kb_end);
    const int g = group_of_unit(tile, p, group);
    if (g != group) {
      group = g;
      group_m = __ldg(p.stacked.rows + g);
      group_row0 = __ldg(p.stacked.row0 + g);
    }
    Unit v;
    v.tile = tile;
    v.split = 0;
    v.kb_begin = kb_begin;
    v.kb_end = kb_end;
    gemm::raster_tile(tile - __ldg(p.groups.tile_start + g), blocks_of(group_m, T::kBlockM), blocks_of(p.n, T::kBlockN),
                      p.sched.group_m, &v.m_block, &v.n_block);
    v.group = g;
    v.m = group_m;
    v.n = p.n;
    v.a_row0 = group_row0 + v.m_block * T::kBlockM;
    v.b_row0 = g * p.n + v.n_block * T::kBlockN;
    v.sfa = nullptr;  // each gathered row brings its own A scales (StackedGather::extras)
    v.sfa_ld = 0;
    const float* sfb = p.bs.sfb + static_cast<int64_t>(g) * blocks_of(p.n, 128) * p.bs.k_blocks;
    const BScaleRows b = tile_b_scale_rows<T::kBlockN>(sfb, p.bs.k_blocks, p.n, v.n_block);
    v.sfb = b.first;
    v.sfb_part_stride = b.part_stride;
    return v;
  }
  // As GroupedProblems::warp_uniform, with the tile's first A row (the row scatter's) and its first
  // K block (a tail part's: read from memory, the K loop's trip count would leave the uniform
  // datapath, as block-scaled "Grouped v2" measured for kb_end).
  __device__ __forceinline__ static Unit warp_uniform(const Unit& w) {
    Unit v = grouped_unit_as_lane0(w);
    v.a_row0 = __shfl_sync(0xffffffffu, w.a_row0, 0);
    v.kb_begin = __shfl_sync(0xffffffffu, w.kb_begin, 0);
    return v;
  }
  // The unit's gather: its tile rows' source rows and scales.
  __device__ __forceinline__ static StackedGather a_gather(const Unit& w, const gemm::KernelParams& p) {
    return StackedGather{p.gather.a,    p.k, p.gather.index + w.a_row0, p.gather.index_div,
                         min(w.m - w.m_block * T::kBlockM, T::kBlockM), p.bs.sfa, p.bs.sfa_ld};
  }
  // The kernel's own maps: B over every group's B (A is gathered; its map is never loaded).
  __device__ __forceinline__ static const CUtensorMap* a_map(const Unit&, const gemm::KernelParams&,
                                                             const CUtensorMap* own) {
    return own;
  }
  __device__ __forceinline__ static const CUtensorMap* b_map(const Unit&, const gemm::KernelParams&,
                                                             const CUtensorMap* own) {
    return own;
  }
  __device__ __forceinline__ static const CUtensorMap* d_map(const Unit&, const gemm::KernelParams&,
                                                             const CUtensorMap* own) {
    return own;
  }
  __device__ __forceinline__ static int m(const Unit& w, const gemm::KernelParams&) { return w.m; }
  __device__ __forceinline__ static int n(const Unit& w, const gemm::KernelParams&) { return w.n; }
};

}  // namespace lowbit::blockscaled
