// One compiled swap-AB expert GEMM kernel behind plain function pointers: the translation unit
// CMake generates for line I of moe/variants.def is
//     #include "moe/variant_launch.cuh"
//     LOWBIT_MOE_DEFINE_VARIANT(I)
// and defines lowbit::moe::variant_launcher_I(), which the launcher finds through the generated
// table (moe_variants_gen.h).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include "hopper/cluster_launch.h"
#include "hopper/grid_dependency.cuh"
#include "moe/expert_gemm_kernel.cuh"
#include "moe/variant_launcher.h"
#include "moe/variant_table.h"

namespace lowbit::moe {

template <int kLine>
struct VariantOf {
  static constexpr gemm::TokenTileSpec S = kMoeVariantSpecs[kLine];
  using T = ExpertGemmTraits<S.tokens, expert_gemm_stages(S.tokens)>;
  static constexpr auto kernel = expert_gemm_kernel<T>;

  static cudaError_t opt_in() { return hopper::opt_in_dynamic_smem<kernel>(T::kSmemBytes); }
  static cudaError_t launch(int ctas, cudaStream_t stream, bool pdl, const CUtensorMap& w, const CUtensorMap& x,
                            const MoeParams& p) {
    const cudaError_t attr_status = opt_in();
    if (attr_status != cudaSuccess) return attr_status;
    return hopper::launch_kernel(kernel, ctas, T::kThreads, T::kSmemBytes, stream, pdl, w, x, p);
  }
};

}  // namespace lowbit::moe

#define LOWBIT_MOE_DEFINE_VARIANT(line)                                                    \
  namespace lowbit::moe {                                                                  \
  const VariantLauncher& variant_launcher_##line() {                                       \
    using V = VariantOf<line>;                                                             \
    static constexpr VariantLauncher l{&V::launch, &V::opt_in, V::T::kSmemBytes};          \
    return l;                                                                              \
  }                                                                                        \
  }
