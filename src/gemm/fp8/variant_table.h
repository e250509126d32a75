// The compiled FP8 GEMM kernels as data (gemm/fp8/variants.def), for the host: the launcher finds
// a call's kernel here, and fp8_config_compiled asks the same question of the same lines.
#pragma once

#include <string>

#include "lowbit/gemm.h"

namespace lowbit::fp8 {

enum class VariantEpilogue : int { kPlain, kStaged, kFused };

struct Fp8VariantSpec {
  int block_m, block_n;
  OutType out;
  VariantEpilogue epilogue;
  int cluster, promote_every, resident_rows;
  bool overlap, uneven;
  int cluster_splits;  // > 1: split K reduced within a cluster of up to this many CTAs; 0: the workspace
  bool stream_k;       // the last tiles' K blocks dealt out over the grid (gemm::StreamKWalk)
  const char* reason;
};

namespace variant_def {
constexpr OutType BF16 = OutType::kBF16, FP32 = OutType::kFP32, FP16 = OutType::kFP16;
constexpr VariantEpilogue Plain = VariantEpilogue::kPlain, Staged = VariantEpilogue::kStaged,
                          Fused = VariantEpilogue::kFused;
}  // namespace variant_def

inline constexpr Fp8VariantSpec kFp8VariantSpecs[] = {
#define LOWBIT_FP8_VARIANT(bm, bn, out, epi, cluster, promote, resident, overlap, uneven, csplit, stream_k, reason) \
  Fp8VariantSpec{bm, bn, variant_def::out, variant_def::epi, cluster, promote, resident, overlap != 0, uneven != 0, \
                 csplit, stream_k != 0, reason},
#include "gemm/fp8/variants.def"
#undef LOWBIT_FP8_VARIANT
};
inline constexpr int kNumFp8VariantSpecs = static_cast<int>(sizeof(kFp8VariantSpecs) / sizeof(kFp8VariantSpecs[0]));

// The line of the kernel for these choices, or -1 where none is compiled: split K through the
// workspace (cluster_splits = 0), or the first line that reduces at least `cluster_splits` splits
// within a cluster; walked stream-K or not.
constexpr int find_fp8_variant(int block_m, int block_n, OutType out, VariantEpilogue epilogue, int cluster,
                               int promote_every, bool resident, bool overlap, bool uneven, int cluster_splits = 0,
                               bool stream_k = false) {
  for (int i = 0; i < kNumFp8VariantSpecs; ++i) {
    const Fp8VariantSpec& s = kFp8VariantSpecs[i];
    if (s.block_m == block_m && s.block_n == block_n && s.out == out && s.epilogue == epilogue &&
        s.cluster == cluster && s.promote_every == promote_every && (s.resident_rows > 0) == resident &&
        s.overlap == overlap && s.uneven == uneven && s.stream_k == stream_k &&
        (cluster_splits == 0 ? s.cluster_splits == 0 : s.cluster_splits >= cluster_splits))
      return i;
  }
  return -1;
}
// What a call's epilogue kind runs (Fp8EpilogueKind: kBias is the staged epilogue).
constexpr VariantEpilogue variant_epilogue(Fp8EpilogueKind k) {
  return k == Fp8EpilogueKind::kFused  ? VariantEpilogue::kFused
         : k == Fp8EpilogueKind::kBias ? VariantEpilogue::kStaged
                                       : VariantEpilogue::kPlain;
}

// What is compiled for one tile, for error messages: "BF16 plain promote=1; ...".
inline std::string compiled_variants_text(int block_m, int block_n) {
  std::string text;
  for (const Fp8VariantSpec& s : kFp8VariantSpecs) {
    if (s.block_m != block_m || s.block_n != block_n) continue;
    if (!text.empty()) text += "; ";
    text += s.out == OutType::kFP32 ? "FP32" : s.out == OutType::kFP16 ? "FP16" : "BF16";
    text += s.epilogue == VariantEpilogue::kFused ? " fused" : s.epilogue == VariantEpilogue::kStaged ? " staged" : " plain";
    text += " promote=" + std::to_string(s.promote_every);
    if (s.cluster > 1) text += " cluster=" + std::to_string(s.cluster);
    if (s.resident_rows) text += " resident=1";
    if (s.overlap) text += " overlap=1";
    if (s.uneven) text += " uneven=1";
    if (s.cluster_splits) text += " creduce=1 (up to " + std::to_string(s.cluster_splits) + " splits)";
    if (s.stream_k) text += " sk=1|2";
  }
  return "bm=" + std::to_string(block_m) + ",bn=" + std::to_string(block_n) + " is compiled for: " +
         (text.empty() ? std::string("nothing") : text);
}

}  // namespace lowbit::fp8
