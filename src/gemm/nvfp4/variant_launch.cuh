// One compiled NVFP4 token tile behind plain function pointers: the translation unit CMake generates
// for line I of gemm/nvfp4/variants.def is
//     #include "gemm/nvfp4/variant_launch.cuh"
//     LOWBIT_NVFP4_DEFINE_VARIANT(I)
// and defines lowbit::nvfp4::variant_launcher_I(), which the launchers find through the generated
// table (nvfp4_variants_gen.h).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include "gemm/nvfp4/kernel.cuh"
#include "gemm/nvfp4/variant_launcher.h"
#include "gemm/nvfp4/variant_table.h"
#include "hopper/cluster_launch.h"
#include "hopper/grid_dependency.cuh"

namespace lowbit::nvfp4 {

template <int kLine>
struct VariantOf {
  static constexpr gemm::TokenTileSpec S = kNvfp4VariantSpecs[kLine];
  using T = Nvfp4Traits<S.tokens>;
  template <bool kGrouped>
  static cudaError_t launch(int grid, cudaStream_t stream, const CUtensorMap& act, const Nvfp4KernelParams& p) {
    cudaError_t e = hopper::opt_in_dynamic_smem<nvfp4_gemm_kernel<T, kGrouped>>(T::kSmemBytes);
    if (e != cudaSuccess) return e;
    // Grouped: launched with PDL behind the preparation (or activation) kernel, so its launch and
    // prologue hide under that kernel's tail; it waits before reading what they wrote.
    return hopper::launch_kernel(nvfp4_gemm_kernel<T, kGrouped>, dim3(grid), dim3(T::kThreads), T::kSmemBytes, stream,
                                 kGrouped, act, p);
  }
  // A tile staged in the ring needs one unit per CTA: no grouped kernel.
  static constexpr Nvfp4LaunchFn grouped_launch() {
    if constexpr (T::kEpiInRing) return nullptr;
    else return &launch<true>;
  }
};

}  // namespace lowbit::nvfp4

#define LOWBIT_NVFP4_DEFINE_VARIANT(line)                                                                        \
  namespace lowbit::nvfp4 {                                                                                      \
  const VariantLauncher& variant_launcher_##line() {                                                             \
    using V = VariantOf<line>;                                                                                   \
    static constexpr VariantLauncher l{&V::launch<false>, V::grouped_launch(), V::T::kStages, V::T::kSmemBytes}; \
    return l;                                                                                                    \
  }                                                                                                              \
  }
