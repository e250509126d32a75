// The expert GEMM's mainloop pieces. Pipeline, WGMMA issue and double-buffered partials are the
// FP8 GEMM's (gemm/core/mainloop.cuh) and the per-stage scale copy the block-scaled GEMM's
// (blockscaled::ScaleStageLoad: the token tile's X scales of the stage's K block). What differs
// is the promotion: with swap-AB the per-token X scale varies along the accumulator's columns,
// not its rows.
#pragma once

#include <cstdint>

#include "gemm/blockscaled/mainloop.cuh"
#include "gemm/core/mainloop.cuh"

namespace lowbit::moe {

// gemm::Consumer's Promotion policy. m64nN accumulator fragment: element 4g + 2h + e sits in
// column 8g + 2 (lane % 4) + e (the token) and row lane / 4 + 8h (the weight row), so each
// thread needs N / 4 token scales per K block, read from the stage as float2 pairs. The W block
// scale is one float per tile per K block, fetched a block ahead (gemm::Consumer).
template <class T>
struct TokenScalePromotion {
  typename T::SharedStorage* ss;
  const float* sfb_row;  // the unit's W scales, one per K block
  int col;               // 2 * (lane % 4)

  static constexpr int kGroups = T::kBlockN / 8;
  static constexpr bool kReadsStage = true;  // the stage's X scales
  struct Pending { float sb; };
  // The token scales are read at retire: N / 4 of them per partial would cost registers across
  // the MMAs.
  struct Staged {};
  struct Scale { float s[2 * kGroups]; };

  __device__ __forceinline__ void issued(Pending& p, int kb) const { p.sb = __ldg(sfb_row + kb); }
  static constexpr int kStaticGroup = 1;
  static constexpr bool kThirdPartial = false;  // Consumer::kDepth; unmeasured on this path
  template <int kPos>
  __device__ __forceinline__ Staged read_stage(int /*stage*/) { return {}; }
  __device__ __forceinline__ Scale scale(const Pending& p, const Staged&, int stage, int /*consumer_wg*/,
                                         int /*part_n*/) const {
    Scale s;
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
      const float2 sa = *reinterpret_cast<const float2*>(&ss->sfa[stage][8 * g + col]);
      s.s[2 * g] = sa.x * p.sb;
      s.s[2 * g + 1] = sa.y * p.sb;
    }
    return s;
  }
  template <int R>
  __device__ __forceinline__ void apply(const Scale& s, const float (&part)[R], float (&acc)[R]) const {
    static_assert(R == 4 * kGroups, "one partial per m64nN fragment");
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
      acc[4 * g + 0] = fmaf(part[4 * g + 0], s.s[2 * g], acc[4 * g + 0]);
      acc[4 * g + 1] = fmaf(part[4 * g + 1], s.s[2 * g + 1], acc[4 * g + 1]);
      acc[4 * g + 2] = fmaf(part[4 * g + 2], s.s[2 * g], acc[4 * g + 2]);
      acc[4 * g + 3] = fmaf(part[4 * g + 3], s.s[2 * g + 1], acc[4 * g + 3]);
    }
  }
};

}  // namespace lowbit::moe
