// Where an NVFP4 work unit's operands come from: the problem layout, a parameter of the one
// kernel. Dense: one problem, the activation tensor map a __grid_constant__ parameter, units =
// tiles x K splits. Grouped: G problems described in device memory, one activation map per group
// patched on the device, the tiles of all groups walked as one sequence (no K split). Both answer
// the same question for unit u: which tile, of which operands, written where.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>

#include <cstdint>

#include "gemm/core/tile_scheduler.cuh"
#include "gemm/nvfp4/traits.cuh"
#include "hopper/tma.cuh"
#include "lowbit/nvfp4.h"

namespace lowbit::nvfp4 {

struct Nvfp4Unit {
  int n_tile, m_tile, split;
  int tile;  // linear output tile id (split-K bookkeeping)
  int kb_begin, kb_end;
};

struct Nvfp4UnitView {
  Nvfp4Unit w;
  const CUtensorMap* tm_act;
  const uint8_t* weights;  // the unit's 128-row weight tile, K block 0
  __nv_bfloat16* d;
  int m, n;
  float alpha;
};

// A 128-row weight tile's prepacked blocks are contiguous: K block 0 of tile n_tile.
__device__ __forceinline__ const uint8_t* weight_tile(const uint8_t* prepacked, int n_tile, int k_blocks) {
  return prepacked + static_cast<int64_t>(n_tile) * k_blocks * kWeightStageBytes;
}

__device__ __forceinline__ Nvfp4Unit nvfp4_unit(const Nvfp4KernelParams& p, int u) {
  Nvfp4Unit w;
  w.split = u % p.splits;
  w.tile = u / p.splits;
  w.n_tile = w.tile % p.tiles_n;  // neighbouring units share the activation rows in L2
  w.m_tile = w.tile / p.tiles_n;
  w.kb_begin = static_cast<int>((static_cast<int64_t>(w.split) * p.k_blocks) / p.splits);
  w.kb_end = static_cast<int>((static_cast<int64_t>(w.split + 1) * p.k_blocks) / p.splits);
  return w;
}

struct DenseProblems {
  const Nvfp4KernelParams& p;
  const CUtensorMap* tm_act;

  __device__ __forceinline__ int num_units() const { return p.tiles_n * p.tiles_m * p.splits; }
  __device__ __forceinline__ Nvfp4UnitView resolve(int u) const {
    Nvfp4UnitView v;
    v.w = nvfp4_unit(p, u);
    v.tm_act = tm_act;
    v.weights = weight_tile(p.weights, v.w.n_tile, p.k_blocks);
    v.d = p.d;
    v.m = p.m;
    v.n = p.n;
    v.alpha = p.alpha;
    return v;
  }
};

// Each role keeps its own cursor: a group's descriptor is re-read only when the walk enters a
// new group, and the thread that issues TMA through a group's map acquires it first (the
// preparation kernel wrote it through the generic proxy).
template <int kTokens>
struct GroupedProblems {
  const Nvfp4KernelParams& p;
  bool acquire_maps;
  int group = -1;
  struct Cached {
    int m, n, k_blocks, tiles_n;
    const uint8_t* weights;
    __nv_bfloat16* d;
    float alpha;
  } prob{};

  __device__ __forceinline__ int num_units() const { return __ldg(p.tile_start + p.groups); }
  __device__ __forceinline__ Nvfp4UnitView resolve(int u) {
    const gemm::GroupedTileSchedule sched{p.tile_start, p.groups};
    const int g = sched.group_of(u);
    if (g != group) {
      group = g;
      const Nvfp4GroupedProblem& d = p.problems[g];
      const float ga = p.nvfp4_activations ? d.a_global_scale : 1.0f;
      prob = Cached{d.m, d.n, (d.k + kBlockK - 1) / kBlockK, (d.n + kTileRows - 1) / kTileRows,
                    static_cast<const uint8_t*>(d.b_prepacked), static_cast<__nv_bfloat16*>(d.d),
                    ga * d.b_global_scale * p.alpha};
      if (acquire_maps) hopper::tensor_map_acquire(p.act_maps + g);
    }
    const int local = u - __ldg(p.tile_start + g);
    Nvfp4UnitView v;
    v.w.n_tile = local % prob.tiles_n;
    v.w.m_tile = local / prob.tiles_n;
    v.w.split = 0;
    v.w.tile = u;
    v.w.kb_begin = 0;
    v.w.kb_end = prob.k_blocks;
    v.tm_act = p.act_maps + g;
    v.weights = weight_tile(prob.weights, v.w.n_tile, prob.k_blocks);
    v.d = prob.d;
    v.m = prob.m;
    v.n = prob.n;
    v.alpha = prob.alpha;
    return v;
  }
};

}  // namespace lowbit::nvfp4
