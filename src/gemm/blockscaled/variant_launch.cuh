// One compiled block-scaled dense kernel: the translation unit CMake generates for line I of
// gemm/blockscaled/variants.def is
//     #include "gemm/blockscaled/variant_launch.cuh"
//     LOWBIT_BS_DEFINE_VARIANT(I)
#pragma once

#include "gemm/blockscaled/core_traits.cuh"
#include "gemm/blockscaled/variant_launcher.h"
#include "gemm/blockscaled/variant_table.h"
#include "gemm/core/kernel.cuh"
#include "gemm/variant_define.h"
#include "hopper/cluster_launch.h"

namespace lowbit::blockscaled {

template <int kLine>
struct VariantOf {
  static constexpr BsVariantSpec S = kBsVariantSpecs[kLine];
  using T = CoreTraits<S.block_m, S.block_n, S.out == OutType::kFP32, S.overlap, S.cluster_splits, S.problems>;
  // The core kernel's fourth map (the per-tensor kernels' row broadcast or trimmed B) is the A
  // scales' here (ScaleStageLoad, for CoreTraits::kAScaleGroup > 1).
  // Split within a cluster, each cluster is one tile's splits: whole clusters, at most one per tile.
  static cudaError_t launch(int grid, int max_units, cudaStream_t s, const CUtensorMap& a, const CUtensorMap& b,
                            const CUtensorMap& d, const CUtensorMap& sfa, const CUtensorMap& a_tail,
                            const gemm::KernelParams& p, int device, int* launched) {
    const int cluster = T::kClusterSplits > 1 && p.sched.splits > 1 ? p.sched.splits : 1;
    return hopper::launch_persistent<gemm::gemm_kernel<T>>(grid, max_units / cluster, T::kThreads, T::kSmemBytes,
                                                           cluster, device, s, launched, a, b, d, sfa, a_tail, p);
  }
  static cudaError_t resident(int cluster, int device, int* ctas) {
    return hopper::prepare_persistent<gemm::gemm_kernel<T>>(T::kThreads, T::kSmemBytes, cluster, device, ctas);
  }
};

}  // namespace lowbit::blockscaled

#define LOWBIT_BS_DEFINE_VARIANT(line) LOWBIT_DEFINE_VARIANT(lowbit::blockscaled, line)
