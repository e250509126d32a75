// The compiled block-scaled dense kernels as data (gemm/blockscaled/variants.def), for the host.
#pragma once

#include <string>

#include "lowbit/gemm.h"

namespace lowbit::blockscaled {

// What a kernel walks: one dense problem, the grouped layouts (GroupedProblems: descriptor array,
// masked, contiguous), or stacked problems with the row scatter (StackedProblems: the fused MoE's
// expert GEMM).
enum class BsProblems { kDense, kGrouped, kStacked };

struct BsVariantSpec {
  int block_m, block_n;
  OutType out;
  bool overlap;
  int cluster_splits;  // > 1: split K reduced within a cluster of up to this many CTAs; 0: the workspace
  BsProblems problems;
  bool wave_only;  // the dense chooser takes it only where its unsplit units fill one wave (variants.def)
  const char* reason;
};

namespace variant_def {
constexpr OutType BF16 = OutType::kBF16, FP32 = OutType::kFP32;
constexpr BsProblems DENSE = BsProblems::kDense, GROUPED = BsProblems::kGrouped, STACKED = BsProblems::kStacked;
constexpr bool MODEL = false, WAVE = true;
}  // namespace variant_def

inline constexpr BsVariantSpec kBsVariantSpecs[] = {
#define LOWBIT_BS_VARIANT(bm, bn, out, overlap, csplit, problems, chooser, reason) \
  BsVariantSpec{bm, bn, variant_def::out, overlap != 0, csplit, variant_def::problems, variant_def::chooser, reason},
#include "gemm/blockscaled/variants.def"
#undef LOWBIT_BS_VARIANT
};
inline constexpr int kNumBsVariantSpecs = static_cast<int>(sizeof(kBsVariantSpecs) / sizeof(kBsVariantSpecs[0]));

// The line of the kernel for these problems, tile, output and epilogue, or -1: split K through the
// workspace (cluster_splits = 0), or the first line that reduces at least `cluster_splits` splits
// within a cluster.
constexpr int find_bs_variant(int block_m, int block_n, OutType out, bool overlap = false, int cluster_splits = 0,
                              BsProblems problems = BsProblems::kDense) {
  for (int i = 0; i < kNumBsVariantSpecs; ++i)
    if (kBsVariantSpecs[i].problems == problems && kBsVariantSpecs[i].block_m == block_m &&
        kBsVariantSpecs[i].block_n == block_n && kBsVariantSpecs[i].out == out && kBsVariantSpecs[i].overlap == overlap &&
        (cluster_splits == 0 ? kBsVariantSpecs[i].cluster_splits == 0
                             : kBsVariantSpecs[i].cluster_splits >= cluster_splits))
      return i;
  return -1;
}
// The most splits a tile reduces within a cluster for this output (0: none compiled).
constexpr int bs_cluster_splits(int block_m, int block_n, OutType out) {
  int most = 0;
  for (int i = 0; i < kNumBsVariantSpecs; ++i)
    if (kBsVariantSpecs[i].problems == BsProblems::kDense && kBsVariantSpecs[i].block_m == block_m &&
        kBsVariantSpecs[i].block_n == block_n && kBsVariantSpecs[i].out == out &&
        kBsVariantSpecs[i].cluster_splits > most)
      most = kBsVariantSpecs[i].cluster_splits;
  return most;
}
// Whether the tile is compiled (for BF16; every tile is compiled for both outputs). Each is a core
// FP8 tile's shape, so the core's cost model scores it.
constexpr bool bs_tile_compiled(int block_m, int block_n) { return find_bs_variant(block_m, block_n, OutType::kBF16) >= 0; }

// Whether any kernel (dense or grouped) is compiled `block_n` wide, and the widths as text, for
// the config parser's error.
constexpr bool bs_width_compiled(int block_n) {
  for (int i = 0; i < kNumBsVariantSpecs; ++i)
    if (kBsVariantSpecs[i].problems != BsProblems::kStacked && kBsVariantSpecs[i].block_n == block_n) return true;
  return false;
}
inline std::string bs_widths_text() {
  std::string s;
  for (int w = 16; w <= 256; w += 16)
    if (bs_width_compiled(w)) s += " " + std::to_string(w);
  return s;
}

}  // namespace lowbit::blockscaled
