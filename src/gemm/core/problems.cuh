// What the core walks: its problems policy (T::Problems; DenseProblems where a family's traits
// name none). Every role of the kernel makes its own (Problems::make, after setmaxnreg) and asks it,
// per work unit and with the kernel's parameters, for the tile, the tensor maps to load and store
// through, and the sizes the store clips to. A unit is a WorkUnit, or a type derived from it that
// carries what its problem adds (the grouped block-scaled layout: gemm/blockscaled/problems.cuh),
// so the mainloop and the epilogue take either.
#pragma once

#include <cuda.h>

#include <type_traits>

#include "gemm/core/tile_scheduler.cuh"
#include "gemm/core/traits.cuh"
#include "hopper/cluster.cuh"

namespace lowbit::gemm {

// One problem: the kernel parameters' shape and its maps (the kernel's __grid_constant__
// parameters), walked by TileWalk (or the uneven layout); in a cluster along M, rank r takes the
// r-th tile of the cluster's column.
template <class T>
struct DenseProblems {
  using Unit = WorkUnit;

  __device__ __forceinline__ static DenseProblems make(bool /*issues_tma*/) {
    return DenseProblems{};
  }
  // Units of the whole walk (read once, before the role split); with stream-K, one past this CTA's
  // last (StreamKWalk::end_unit).
  __device__ __forceinline__ static int num_units(const KernelParams& p) {
    if constexpr (StreamK<T>::value) return p.sk.end_unit(static_cast<int>(blockIdx.x));  // this CTA's
    else return p.sched.num_units();
  }
  // The kernel's parameters come with each call (a walk holds no pointer: docs/perf.md
  // block-scaled "Grouped on the core" and "Grouped v2").
  __device__ __forceinline__ static Unit unit(int u, const KernelParams& p) {
    WorkUnit w;
    if constexpr (UnevenColumns<T>::value) w = p.uneven.unit(p.sched, p.walk, u);
    else if constexpr (StreamK<T>::value) w = p.sk.unit(p.sched, p.walk, u);
    else w = p.walk.unit(p.sched, u);
    if constexpr (T::kClusterM > 1) w.m_block = w.m_block * T::kClusterM + static_cast<int>(hopper::cluster_rank());
    return w;
  }
  // The unit's sizes (the store clips to them); its maps are the kernel's own parameters, which
  // the kernel names itself.
  __device__ __forceinline__ static int m(const Unit&, const KernelParams& p) { return p.m; }
  __device__ __forceinline__ static int n(const Unit&, const KernelParams& p) { return p.n; }
};

// T's problems policy, or one dense problem.
template <class T>
using ProblemsMember = typename T::Problems;
template <class T>
using ProblemsOf = typename PolicyOr<ProblemsMember, T, DenseProblems<T>>::type;
// Whether T walks several problems (its own Problems policy): such kernels run unsplit, single-CTA
// units with the plain epilogue.
template <class T>
inline constexpr bool kWalksGroups = !std::is_same_v<ProblemsOf<T>, DenseProblems<T>>;

// Whether T's problems gather A's rows (Problems::kGathersA): each tile row comes from its own row
// of a source matrix, which no tensor map box can follow. The producer warpgroup then copies the
// rows with cp.async (produce_gathered_rows, gemm/core/mainloop.cuh), each thread one tile row,
// through the walk's gather (Problems::a_gather(w, p): `row(t)`, the source row of tile row t or
// -1, zero filled; `a`, `lda`, the source; `extras(ss, stage, kb, t, src)`, what the family copies
// per row besides, e.g. its A scales), and only B comes by TMA.
template <class P, class = void>
struct GathersA : std::false_type {};
template <class P>
struct GathersA<P, std::void_t<decltype(P::kGathersA)>> : std::bool_constant<P::kGathersA> {};
template <class T>
inline constexpr bool kGathersA = GathersA<ProblemsOf<T>>::value;
// The producer threads that gather: the whole producer warpgroup, one tile row each. The copies'
// issue is on the ring's path: one warp copying all 128 rows ran the MoE GEMM at half speed
// (docs/perf.md block-scaled, "the gather in the A load").
inline constexpr int kGatherThreads = 128;

}  // namespace lowbit::gemm
