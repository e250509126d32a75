// One compiled FP8 GEMM kernel behind a plain function pointer: the translation unit CMake
// generates for line I of gemm/fp8/variants.def is
//     #include "gemm/fp8/variant_launch.cuh"
//     LOWBIT_FP8_DEFINE_VARIANT(I)
// and defines lowbit::fp8::variant_launcher_I(), which the launcher finds through the generated
// table (fp8_variants_gen.h).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <type_traits>

#include "gemm/core/kernel.cuh"
#include "gemm/fp8/epilogue_fused.cuh"
#include "gemm/fp8/variant_launcher.h"
#include "gemm/fp8/variant_table.h"
#include "gemm/fp8/variants.h"
#include "gemm/variant_define.h"
#include "hopper/cluster_launch.h"

namespace lowbit::fp8 {

template <int kLine>
struct VariantOf {
  static constexpr Fp8VariantSpec S = kFp8VariantSpecs[kLine];
  static_assert(fp8_tile_listed(S.block_m, S.block_n), "a variants.def line names a tile of variants.h");
  static constexpr bool kFused = S.epilogue == VariantEpilogue::kFused;
  static constexpr bool kStaged = S.epilogue != VariantEpilogue::kPlain;
  // Split within a cluster, the landing slots past the epilogue staging take whole stages.
  static constexpr int kStageBytes = S.block_m * 128 + S.block_n * 128;
  static constexpr int kLandingStages =
      (gemm::cluster_landing_bytes(S.block_m, S.block_n, S.cluster_splits) + kStageBytes - 1) / kStageBytes;
  using Core =
      gemm::KernelTraits<S.block_n, fp8_stages_for(S.block_n, kFused, S.block_m, S.resident_rows) - kLandingStages,
                         S.out == OutType::kFP32, kStaged, S.cluster, S.promote_every, S.block_m, S.overlap, S.uneven,
                         S.out == OutType::kFP16, /*epi_slots=*/2, S.cluster_splits, S.stream_k>;
  static_assert(kFused || S.resident_rows == 0, "resident rows: the fused epilogue's");
  using T = std::conditional_t<kFused, WithFusedEpilogue<Core, S.resident_rows>, Core>;
  static cudaError_t launch(int grid, int max_units, cudaStream_t stream, const CUtensorMap& a, const CUtensorMap& b,
                            const CUtensorMap& d, const CUtensorMap& bcast, const CUtensorMap& a_tail,
                            const gemm::KernelParams& p, int device, int* launched) {
    // A forced grid may exceed what is resident only without clusters (peers must co-run). Split
    // within a cluster, each cluster is one tile's splits: whole clusters, at most one per tile.
    const int cluster = S.cluster_splits > 1 && p.sched.splits > 1 ? p.sched.splits : S.cluster;
    return hopper::launch_persistent<gemm::gemm_kernel<T>>(grid, max_units / (cluster / S.cluster), T::kThreads,
                                                           T::kSmemBytes, cluster, device, stream, launched, a, b, d,
                                                           bcast, a_tail, p);
  }
  static cudaError_t resident(int cluster, int device, int* ctas) {
    return hopper::prepare_persistent<gemm::gemm_kernel<T>>(T::kThreads, T::kSmemBytes, cluster, device, ctas);
  }
};

}  // namespace lowbit::fp8

#define LOWBIT_FP8_DEFINE_VARIANT(line) LOWBIT_DEFINE_VARIANT(lowbit::fp8, line)
