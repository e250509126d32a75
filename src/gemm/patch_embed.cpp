#include "lowbit/patch_embed.h"

#include <climits>
#include <cstdint>
#include <string>

namespace lowbit {

Status patch_embed_fp8(const PatchEmbedArgs& a, cudaStream_t stream, const Fp8GemmConfig* config) {
  if (!a.bias) return Status::Invalid("patch_embed_fp8: bias is required");
  if (a.bias_len != a.n)
    return Status::Invalid("patch_embed_fp8: bias has " + std::to_string(a.bias_len) + " entries, N is " +
                           std::to_string(a.n));
  if (!a.pos) return Status::Invalid("patch_embed_fp8: pos is required");
  if (reinterpret_cast<uintptr_t>(a.bias) % 16 || reinterpret_cast<uintptr_t>(a.pos) % 16)
    return Status::Invalid("patch_embed_fp8: bias and pos must be 16-byte aligned");
  if (a.pos_rows <= 0 || a.pos_rows > INT_MAX)
    return Status::Invalid("patch_embed_fp8: pos_rows (P) must be in [1, 2^31) (got " + std::to_string(a.pos_rows) +
                           ")");
  if (a.pos_cols != a.n)
    return Status::Invalid("patch_embed_fp8: pos has " + std::to_string(a.pos_cols) + " columns, N is " +
                           std::to_string(a.n));
  if (a.whole_images && a.m > 0 && a.m % a.pos_rows != 0)
    return Status::Invalid("patch_embed_fp8: M = " + std::to_string(a.m) + " is not a multiple of P = " +
                           std::to_string(a.pos_rows) + " (whole_images)");
  Fp8GemmArgs g;
  g.m = a.m;
  g.n = a.n;
  g.k = a.k;
  g.a = a.patches;
  g.b = a.weight;
  g.d = a.out;
  g.out_type = OutType::kBF16;
  g.alpha = a.alpha;
  g.a_scale = a.patches_scale;
  g.b_scale = a.weight_scale;
  g.bias = a.bias;
  g.row_bcast = a.pos;
  g.row_bcast_rows = a.pos_rows;
  g.workspace = a.workspace;
  g.workspace_bytes = a.workspace_bytes;
  // The GEMM's own checks (shapes, the other pointers, the config) name this entry point too.
  const Status st = fp8_gemm(g, stream, config);
  if (st.ok()) return st;
  return Status::Error(st.code(), "patch_embed_fp8: " + st.message());
}

}  // namespace lowbit
