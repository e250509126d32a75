// NVFP4 GEMM mainloop: the producer streams prepacked weights (one bulk copy per stage) and
// activation boxes (TMA); each consumer warpgroup dequantizes its 64 weight rows of a K block
// straight into WGMMA A fragments and multiplies them with the activations in shared memory.
// A new operand path (another 4-bit format) replaces this file only.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>

#include "formats/nvfp4_device.cuh"
#include "gemm/nvfp4/problems.cuh"
#include "gemm/nvfp4/traits.cuh"
#include "hopper/mbarrier.cuh"
#include "hopper/tma.cuh"
#include "hopper/wgmma.cuh"

namespace lowbit::nvfp4 {

// One unit's K blocks, continuing the ring where the previous unit left it.
template <class T>
__device__ __forceinline__ void nvfp4_produce(typename T::SharedStorage& ss, const Nvfp4UnitView& v,
                                              hopper::RingPosition<T::kStages>& pos) {
  const Nvfp4Unit& w = v.w;
  for (int kb = w.kb_begin; kb < w.kb_end; ++kb) {
    ss.bars.producer_acquire(pos);
    uint64_t* full = &ss.bars.full[pos.stage];
    hopper::mbarrier_arrive_expect_tx(full, kWeightStageBytes + T::kActStageBytes);
    hopper::bulk_load(ss.weights[pos.stage], v.weights + static_cast<int64_t>(kb) * kWeightStageBytes,
                      kWeightStageBytes, full);
    // Activation rows past M and columns past K arrive as zeros.
    hopper::tma_load_2d(ss.act[pos.stage], v.tm_act, full, kb * kBlockK, w.m_tile * T::kTokens);
    hopper::tma_load_2d(ss.act[pos.stage] + T::kActBoxBytes, v.tm_act, full, kb * kBlockK + 64, w.m_tile * T::kTokens);
    pos.advance();
  }
}

// One consumer warpgroup: 64 weight rows x kTokens tokens, FP32 accumulators (BF16 WGMMA needs
// no promotion). The A fragments of K block j+1 are built while block j's MMAs run; a fragment
// buffer is rewritten only after the MMAs that read it retired (WGMMA reads A registers
// asynchronously).
template <class T>
struct Nvfp4Consumer {
  static constexpr int kSteps = kBlockK / 16;

  typename T::SharedStorage& ss;
  int consumer_wg;
  hopper::RingPosition<T::kStages> pos;
  int pending_stage = -1;

  __device__ __forceinline__ static void fence_frag(uint32_t (&f)[kSteps][4]) {
#pragma unroll
    for (int s = 0; s < kSteps; ++s) hopper::fence_operands(f[s]);
  }

  // Dequantizes this thread's share of the stage's weights into the m64k16 A fragments of the
  // K block's eight steps: a0 = (r0, k 2q..2q+1), a1 = (r1, same k), a2 = (r0, k + 8), a3 = (r1, k + 8).
  __device__ __forceinline__ void dequantize(int stage, uint32_t (&f)[kSteps][4]) {
    const int t = threadIdx.x % 128;
    const int r0 = 16 * (t / 32) + (t % 32) / 4;
    const uint8_t* chunk = ss.weights[stage] + consumer_wg * kChunkBytes;
    const uint4 v0 = *reinterpret_cast<const uint4*>(chunk + t * 16);
    const uint4 v1 = *reinterpret_cast<const uint4*>(chunk + kPlaneBytes + t * 16);
    const uint2 s0 = *reinterpret_cast<const uint2*>(chunk + kScaleOffset + r0 * 8);
    const uint2 s1 = *reinterpret_cast<const uint2*>(chunk + kScaleOffset + (r0 + 8) * 8);
    const uint32_t w0[4] = {v0.x, v0.y, v0.z, v0.w};
    const uint32_t w1[4] = {v1.x, v1.y, v1.z, v1.w};
    const uint32_t sc0w[2] = {s0.x, s0.y};
    const uint32_t sc1w[2] = {s1.x, s1.y};
#pragma unroll
    for (int j = 0; j < kSteps / 2; ++j) {  // steps 2j and 2j + 1: word j of each plane, one scale pair
      const __nv_bfloat162 sc0 = formats::e4m3x2_to_bf16x2_times_2pow118(sc0w[j / 2] >> (16 * (j % 2)));
      const __nv_bfloat162 sc1 = formats::e4m3x2_to_bf16x2_times_2pow118(sc1w[j / 2] >> (16 * (j % 2)));
      const __nv_bfloat162 m00 = __low2bfloat162(sc0), m01 = __high2bfloat162(sc0);
      const __nv_bfloat162 m10 = __low2bfloat162(sc1), m11 = __high2bfloat162(sc1);
      f[2 * j][0] = scale_pair(formats::e2m1x2_from_word_scaled<0>(w0[j]), m00);
      f[2 * j][2] = scale_pair(formats::e2m1x2_from_word_scaled<1>(w0[j]), m00);
      f[2 * j][1] = scale_pair(formats::e2m1x2_from_word_scaled<0>(w1[j]), m10);
      f[2 * j][3] = scale_pair(formats::e2m1x2_from_word_scaled<1>(w1[j]), m10);
      f[2 * j + 1][0] = scale_pair(formats::e2m1x2_from_word_scaled<2>(w0[j]), m01);
      f[2 * j + 1][2] = scale_pair(formats::e2m1x2_from_word_scaled<3>(w0[j]), m01);
      f[2 * j + 1][1] = scale_pair(formats::e2m1x2_from_word_scaled<2>(w1[j]), m11);
      f[2 * j + 1][3] = scale_pair(formats::e2m1x2_from_word_scaled<3>(w1[j]), m11);
    }
  }

  __device__ __forceinline__ static uint32_t scale_pair(uint32_t raw, __nv_bfloat162 scale) {
    const __nv_bfloat162 v = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&raw), scale);
    return *reinterpret_cast<const uint32_t*>(&v);
  }

  // kN: the MMA width, kTokens or (a tile whose rows past M are at least half of it) kTokens / 2.
  template <int kN>
  __device__ __forceinline__ void issue(uint32_t (&f)[kSteps][4], float (&acc)[kN / 2]) {
    using OpN = hopper::WgmmaRegAOp<hopper::WgmmaKind::kBF16, kN>;
    static_assert(kN == T::kTokens || 2 * kN == T::kTokens, "full or half width");
    ss.bars.consumer_wait(pos);
    dequantize(pos.stage, f);
    const uint64_t desc0 =
        hopper::make_smem_desc(ss.act[pos.stage], 0, 1024, hopper::SmemSwizzle::k128B);
    const uint64_t desc1 =
        hopper::make_smem_desc(ss.act[pos.stage] + T::kActBoxBytes, 0, 1024, hopper::SmemSwizzle::k128B);
    fence_frag(f);
    hopper::fence_operands(acc);
    hopper::wgmma_fence();
#pragma unroll
    for (int s = 0; s < kSteps; ++s)
      OpN::mma(acc, f[s], hopper::advance_desc(s < 4 ? desc0 : desc1, 32 * (s % 4)), true);
    hopper::wgmma_commit_group();
    pending_stage = pos.stage;
    pos.advance();
  }

  // After this, the MMAs reading `f` (and the stage `stage`) have retired.
  template <int kInFlight, int R>
  __device__ __forceinline__ void retire(uint32_t (&f)[kSteps][4], int stage, float (&acc)[R]) {
    hopper::wgmma_wait_group<kInFlight>();
    fence_frag(f);
    hopper::fence_operands(acc);
    if (threadIdx.x % 32 == 0) ss.bars.consumer_release(stage);
  }

  template <int kN = T::kTokens>
  __device__ __forceinline__ void run(const Nvfp4Unit& w, float (&acc)[kN / 2]) {
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) acc[i] = 0.0f;
    uint32_t fa[kSteps][4], fb[kSteps][4];
    // Carried across units, and (grouped) read from memory, the ring position and K range no
    // longer look warp-uniform to the compiler, which then builds every WGMMA descriptor in
    // vector registers and moves it over (R2UR). Broadcasting them from lane 0 makes them
    // uniform again: the grouped kernel went from 63 R2UR to 18, none in the steady state.
    pos.stage = __shfl_sync(0xffffffffu, pos.stage, 0);
    pos.phase = __shfl_sync(0xffffffffu, pos.phase, 0);
    const int kb_end = __shfl_sync(0xffffffffu, w.kb_end, 0);
    int kb = __shfl_sync(0xffffffffu, w.kb_begin, 0);
    if (kb == kb_end) return;
    issue<kN>(fa, acc);
    ++kb;
    while (true) {
      if (kb == kb_end) {
        retire<0>(fa, pending_stage, acc);
        break;
      }
      int prev = pending_stage;
      issue<kN>(fb, acc);
      ++kb;
      retire<1>(fa, prev, acc);
      if (kb == kb_end) {
        retire<0>(fb, pending_stage, acc);
        break;
      }
      prev = pending_stage;
      issue<kN>(fa, acc);
      ++kb;
      retire<1>(fb, prev, acc);
    }
  }
};

}  // namespace lowbit::nvfp4
