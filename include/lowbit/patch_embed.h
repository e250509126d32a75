// ViT patch embedding on the FP8 GEMM with its epilogue fused:
//   out[r, :] = alpha * a_scale * w_scale * patches[r, :] . weight^T + bias + pos[r mod P, :]
// patches: E4M3 [M, K] (the flattened patches of M / P images), weight: E4M3 [N, K],
// bias: BF16 [N], pos: BF16 [P, N], out: BF16 [M, N]. One launch; nothing else touches `out`.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "lowbit/gemm.h"
#include "lowbit/status.h"

namespace lowbit {

struct PatchEmbedArgs {
  int64_t m = 0;  // rows (patches); a multiple of pos_rows when whole_images
  int64_t n = 0;  // embedding width, multiple of 16
  int64_t k = 0;  // patch size x channels, multiple of 16
  const void* patches = nullptr;  // E4M3 [m, k]
  const void* weight = nullptr;   // E4M3 [n, k]
  const void* bias = nullptr;     // BF16 [bias_len], bias_len == n, 16-byte aligned
  int64_t bias_len = 0;
  const void* pos = nullptr;      // BF16 [pos_rows, pos_cols], pos_cols == n, 16-byte aligned
  int64_t pos_rows = 0;           // P: patches per image
  int64_t pos_cols = 0;
  bool whole_images = true;       // require m % pos_rows == 0
  void* out = nullptr;            // BF16 [m, n]
  float alpha = 1.0f;
  const float* patches_scale = nullptr;  // optional device scalars (per-tensor dequant scales)
  const float* weight_scale = nullptr;
  void* workspace = nullptr;      // as Fp8GemmArgs::workspace
  size_t workspace_bytes = 0;
};

Status patch_embed_fp8(const PatchEmbedArgs& args, cudaStream_t stream, const Fp8GemmConfig* config = nullptr);

}  // namespace lowbit
