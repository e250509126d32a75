// Compile-time shape of the NVFP4 (W4A16) GEMM kernel and its shared-memory layout.
//
// The kernel computes D^T: the weights, dequantized in registers, are WGMMA's A operand (M side,
// 64 weight rows per consumer warpgroup, 128 per CTA) and the BF16 activations its B operand from
// shared memory (N side: kTokens tokens). A stage holds one 128-wide K block: the tile's
// prepacked weights (kWeightStageBytes, one bulk copy) and the activations (two TMA boxes of
// kTokens rows x 64 BF16, 128-byte swizzled).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "hopper/mbarrier.cuh"
#include "lowbit/nvfp4.h"

namespace lowbit::nvfp4 {

constexpr int kSm90MaxSmemPerBlock = 232448;

// Prepacked weight layout, per 128-row tile and 128-wide K block: two 4608-byte chunks, one per
// consumer warpgroup (64 rows). In a chunk, thread t (warp w = t / 32, lane l; g = l / 4,
// q = l % 4) owns rows r0 = 16w + g and r1 = r0 + 8:
//   [0, 2048)    plane 0: 16 bytes (four words) per thread, row r0
//   [2048, 4096) plane 1: the same for row r1
//   [4096, 4608) scales: 8 bytes per row (rows 0..63), the K block's eight E4M3 scales
// Word j of a plane holds K steps 2j and 2j+1 as four code pairs u = 2 (s - 2j) + h: the codes of
// k = 16s + 8h + 2q (+1) at bits 4u..4u+3 (and 16+4u..16+4u+3), i.e. the packed source byte
// 8s + q + 4h with its nibbles spread apart, so that a pair dequantizes with one shift and one
// mask per field (formats/nvfp4_device.cuh). K step s uses scale s.
constexpr int kTileRows = 128;
constexpr int kBlockK = 128;
constexpr int kChunkBytes = 4608;
constexpr int kPlaneBytes = 2048;
constexpr int kScaleOffset = 4096;
constexpr int kWeightStageBytes = 2 * kChunkBytes;

template <int kTokens_>
struct Nvfp4Traits {
  static constexpr int kTokens = kTokens_;
  static constexpr int kThreads = 384;  // producer warpgroup + two consumer warpgroups
  static constexpr int kActBoxBytes = kTokens * 128;  // kTokens rows x 64 BF16
  static constexpr int kActStageBytes = 2 * kActBoxBytes;
  // The D^T tile, transposed ([token][weight row], BF16; 16-byte units swizzled by the token,
  // gemm/nvfp4/epilogue.cuh). Padding the rows instead (2 KiB more) made M >= 512 5-7% slower.
  static constexpr int kEpiBytes = kTokens * kTileRows * 2;
  // At 256 tokens a stage is 73 KiB and the tile 64 KiB: a tile of its own would leave two
  // stages. The tile is staged in activation stage 0 instead, which only a CTA that runs one
  // unit may do (dense): once both consumer warpgroups retired their last MMAs, no stage is read
  // or loaded again. A persistent (grouped) CTA's producer fills the ring under the epilogue.
  static constexpr int kStageBytes = kWeightStageBytes + kActStageBytes;
  // Stages: what fits in 227 KiB beside the epilogue tile and 2 KiB of barriers and slack,
  // capped at 16 (deeper adds nothing once a K range's bytes are in flight).
  static constexpr int stages_beside(int epi_bytes) { return (kSm90MaxSmemPerBlock - epi_bytes - 2048 - 1024) / kStageBytes; }
  static constexpr bool kEpiInRing = stages_beside(kEpiBytes) < 3;
  static constexpr int kEpiOwnBytes = kEpiInRing ? 16 : kEpiBytes;
  static constexpr int kStagesFit = stages_beside(kEpiOwnBytes);
  static constexpr int kStages = kStagesFit > 16 ? 16 : kStagesFit;
  static_assert(kStages >= 3, "pipeline too shallow");

  static constexpr int kProducerRegs = 40;
  static constexpr int kConsumerRegs = 232;

  struct alignas(1024) SharedStorage {
    uint8_t act[kStages][kActStageBytes];  // 1024-aligned: 128B-swizzle atoms
    uint8_t weights[kStages][kWeightStageBytes];
    alignas(16) uint8_t epi[kEpiOwnBytes];
    hopper::StageBarriers<kStages> bars;
  };
  __device__ __forceinline__ static uint8_t* epi_tile(SharedStorage& ss) { return kEpiInRing ? ss.act[0] : ss.epi; }
  static constexpr int kSmemBytes = static_cast<int>(sizeof(SharedStorage)) + 1024;
  static_assert(kActBoxBytes % 1024 == 0, "activation boxes keep the 1024-byte swizzle alignment");
  static_assert(!kEpiInRing || kActStageBytes >= kEpiBytes, "the staged tile fits in activation stage 0");
};

struct Nvfp4KernelParams {
  // Dense.
  int m, n, k;
  int k_blocks;      // ceil(k / 128)
  int tiles_n;       // ceil(n / 128)
  int tiles_m;       // ceil(m / kTokens)
  int splits;
  const uint8_t* weights;  // prepacked
  float alpha;             // g_a * g_b * kNvfp4DequantCompensation (grouped: the compensation only)
  __nv_bfloat16* d;
  float* partials;
  int* tile_counters;
  // Grouped.
  const Nvfp4GroupedProblem* problems;
  int groups;
  bool nvfp4_activations;     // the groups' a_global_scale applies
  const int* tile_start;      // [groups + 1] in the workspace
  const CUtensorMap* act_maps;  // [groups] in the workspace
};

}  // namespace lowbit::nvfp4
