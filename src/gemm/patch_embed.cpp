#include "lowbit/patch_embed.h"

#include "common/arg_check.h"
#include "gemm/launch_common.h"

#include <climits>
#include <cstdint>
#include <string>

namespace lowbit {

Status patch_embed_fp8(const PatchEmbedArgs& a, cudaStream_t stream, const Fp8GemmConfig* config) {
  // Its own arguments under their own names; the GEMM's checks (shapes, the other pointers, the
  // config) follow in fp8_gemm and name this entry point too.
  check::ArgCheck c("patch_embed_fp8");
  gemm::gemm_shape(c, a.m, a.n, a.k, 16)
      .finite("alpha", a.alpha)
      .ptr("bias", a.bias, 16)
      .rule(a.bias_len != a.n,
            [&] { return "bias has " + std::to_string(a.bias_len) + " entries, N is " + std::to_string(a.n); })
      .ptr("pos", a.pos, 16)
      .dim("pos_rows (P)", a.pos_rows, 1, INT_MAX)
      .rule(a.pos_cols != a.n,
            [&] { return "pos has " + std::to_string(a.pos_cols) + " columns, N is " + std::to_string(a.n); })
      .rule(a.whole_images && a.m > 0 && a.pos_rows > 0 && a.m % a.pos_rows != 0, [&] {
        return "M = " + std::to_string(a.m) + " is not a multiple of P = " + std::to_string(a.pos_rows) +
               " (whole_images)";
      });
  LOWBIT_RETURN_IF_ERROR(c.device());
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
