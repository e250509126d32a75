// Host side of the fused FP8 MoE: argument checks, config choice, workspace carving, tensor
// maps, launches. Stream-ordered; no allocation and no synchronization (except in
// moe_check_status, which exists to synchronize).
#include <cuda_runtime.h>

#include <algorithm>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <type_traits>
#include <string>

#include "common/key_value.h"
#include "gemm/blockscaled/blockscaled_variants_gen.h"
#include "gemm/blockscaled/variant_table.h"
#include "gemm/launch_common.h"
#include "hopper/cluster_launch.h"
#include "hopper/tensor_map.h"
#include "lowbit/device.h"
#include "lowbit/moe.h"
#include "moe/expert_gemm_tiny.cuh"
#include "moe/finish.cuh"
#include "moe/gather.cuh"
#include "moe/layout.cuh"
#include "moe/moe_variants_gen.h"
#include "moe/route.cuh"
#include "moe/workspace.h"

namespace lowbit {
namespace {

using moe::MoeParams;

Status check_shape(const char* who, const MoeShape& s) {
  const std::string w(who);
  if (s.m < 0) return Status::Invalid(w + ": m must be >= 0 (got " + std::to_string(s.m) + ")");
  if (s.experts < 1 || s.experts > moe::kMaxExperts)
    return Status::Invalid(w + ": experts must be in [1, " + std::to_string(moe::kMaxExperts) + "] (got " +
                           std::to_string(s.experts) + ")");
  if (s.top_k < 1 || s.top_k > s.experts || s.top_k > moe::kMaxTopK)
    return Status::Invalid(w + ": top_k must be in [1, min(experts, " + std::to_string(moe::kMaxTopK) + ")] (got " +
                           std::to_string(s.top_k) + " with " + std::to_string(s.experts) + " experts)");
  if (s.k <= 0 || s.k % 128 != 0)
    return Status::Invalid(w + ": k must be a positive multiple of 128 (got " + std::to_string(s.k) + ")");
  if (s.n <= 0 || s.n % 16 != 0)
    return Status::Invalid(w + ": n must be a positive multiple of 16 (got " + std::to_string(s.n) + ")");
  // Sorted rows, weight rows (experts * n) and tile counts are ints on the device.
  const int64_t pairs = static_cast<int64_t>(s.m) * s.top_k;
  if (moe::sorted_rows(s) > INT_MAX / 2 || static_cast<int64_t>(s.experts) * s.n > INT_MAX / 2 ||
      (pairs + s.experts) * ((s.n + 127) / 128) * 4 > INT_MAX / 2)
    return Status::Invalid(w + ": m * top_k, experts * n or the tile count exceed the 2^30 limit");
  return Status::Ok();
}

// The swap-AB GEMM's compiled token tiles (moe/variants.def); null where none has this tile.
const moe::VariantLauncher* find_gemm(int token_tile) {
  for (int i = 0; i < moe::kNumMoeVariantSpecs; ++i)
    if (moe::kMoeVariantSpecs[i].tokens == token_tile) return &moe::kMoeVariantLaunchers[i]();
  return nullptr;
}
// "16, 32, 64 or 128", for error messages.
std::string gemm_tile_list() {
  return gemm::token_tile_list(moe::kMoeVariantSpecs, [](int) { return true; });
}

// MoeConfig::tail_split: the fewest K blocks of a cut tail part; the largest value is where
// gemm::tail_plan stops cutting.
constexpr int kTailMinPartAuto = 16;
constexpr int kMaxTailSplit = (1 << 13) - 1;

Status check_config(const char* who, const MoeConfig& c) {
  const std::string w(who);
  if (c.token_tile != 0 && !find_gemm(c.token_tile))
    return Status::Invalid(w + ": token_tile must be 0 (auto), " + gemm_tile_list());
  if (c.splits < 0 || c.splits > 4) return Status::Invalid(w + ": splits must be 0 (auto) or 1 to 4");
  if (c.grid < 0) return Status::Invalid(w + ": grid must be >= 0 (0 = SM count)");
  if (c.tile_prefetch < -1 || c.tile_prefetch > 1) return Status::Invalid(w + ": tile_prefetch must be -1, 0 or 1");
  if (c.prefetch_mb < -1) return Status::Invalid(w + ": prefetch_mb must be -1 (auto), 0 (off) or a size in MB");
  if (c.pdl < -1 || c.pdl > 1) return Status::Invalid(w + ": pdl must be -1, 0 or 1");
  if (c.tiny < -1 || c.tiny > 1) return Status::Invalid(w + ": tiny must be -1, 0 or 1");
  if (c.pdl_first < -1 || c.pdl_first > 1) return Status::Invalid(w + ": pdl_first must be -1, 0 or 1");
  if (c.token_rows < -1 || c.token_rows > 1) return Status::Invalid(w + ": token_rows must be -1, 0 or 1");
  if (c.token_rows == 1 && c.token_tile != 0 && c.token_tile != 128)
    return Status::Invalid(w + ": token_rows = 1 runs 128-token tiles (token_tile 0 or 128)");
  if (c.token_rows == 1 && c.tiny == 1) return Status::Invalid(w + ": token_rows = 1 is not the tiny path (tiny = 1)");
  if (c.token_rows == 1 && c.splits > 1)
    return Status::Invalid(w + ": token_rows = 1 runs the block-scaled core unsplit (splits 0 or 1)");
  if (c.block_n != 0 && c.block_n != 128 && c.block_n != 256)
    return Status::Invalid(w + ": block_n must be 0 (auto), 128 or 256");
  if (c.block_n != 0 && c.token_rows == 0) return Status::Invalid(w + ": block_n is the token_rows = 1 path's");
  if (c.weights_evict_first < -1 || c.weights_evict_first > 1)
    return Status::Invalid(w + ": weights_evict_first must be -1, 0 or 1");
  if (c.weights_evict_first == 1 && c.token_rows == 0)
    return Status::Invalid(w + ": weights_evict_first = 1 is the token_rows = 1 path's");
  if (c.tail_split < -1 || c.tail_split > kMaxTailSplit)
    return Status::Invalid(w + ": tail_split must be -1, 0 or 1.." + std::to_string(kMaxTailSplit));
  if (c.tail_split > 0 && c.token_rows == 0) return Status::Invalid(w + ": tail_split > 0 is the token_rows = 1 path's");
  return Status::Ok();
}

// The token-rows GEMM: the block-scaled core's stacked kernel for this column tile (variants.def).
int core_line(int block_n) {
  return blockscaled::find_bs_variant(128, block_n, OutType::kFP32, /*overlap=*/true, 0, blockscaled::BsProblems::kStacked);
}

// The tiny-batch GEMM (moe/expert_gemm_tiny.cuh): token tile 16, routing in the kernel.
using TinyTraits = moe::ExpertGemmTraits<moe::kTinyTokenTile, moe::expert_gemm_stages(moe::kTinyTokenTile)>;
template <class LogitT>
cudaError_t tiny_opt_in() {
  return hopper::opt_in_dynamic_smem<moe::expert_gemm_tiny_kernel<TinyTraits, LogitT>>(TinyTraits::kSmemBytes);
}
template <class LogitT>
cudaError_t launch_tiny_gemm(int ctas, cudaStream_t stream, const CUtensorMap& w, const CUtensorMap& x,
                             bool pdl, const LogitT* logits, float softcap, bool renormalize, int32_t* ids_out,
                             float* weights_out, const MoeParams& p) {
  using T = TinyTraits;
  constexpr auto kernel = moe::expert_gemm_tiny_kernel<T, LogitT>;
  const cudaError_t attr_status = tiny_opt_in<LogitT>();
  if (attr_status != cudaSuccess) return attr_status;
  return hopper::launch_kernel(kernel, ctas, T::kThreads, T::kSmemBytes, stream, pdl, w, x, logits, softcap,
                               renormalize, ids_out, weights_out, p);
}

bool tiny_applies(const MoeShape& s, MoeReduce reduce) {
  return reduce == MoeReduce::kAtomic && s.m >= 1 && s.m <= moe::kTinyMaxTokens &&
         static_cast<int64_t>(s.m) * s.top_k <= moe::kTinyMaxPairs && s.experts <= 32 * moe::kTinyRouteLanes;
}

int gemm_smem_bytes(int token_tile, bool token_rows, int block_n) {
  if (token_rows) return blockscaled::kBsVariantLaunchers[core_line(block_n)]().smem_bytes;
  return find_gemm(token_tile)->smem_bytes;
}

// The selection rules (moe_config_table), for a shape and forced fields already checked.
MoeConfig choose(const MoeShape& s, MoeReduce reduce, int sm_count, const MoeConfig* forced, std::string* reason);

// Everything one call needs, checked once.
struct Prepared {
  MoeShape s;
  MoeConfig cfg;
  moe::Layout layout;
  MoeParams p;
  const DeviceInfo* dev = nullptr;  // lowbit's cached description (common/device_cache.h)
  CUtensorMap tm_w, tm_x;  // the expert GEMM's operands (m > 0)
  int core_line = -1;      // token_rows = 1: the core's variant
};

Status make_gemm_maps(const FusedMoeArgs& a, const Prepared& r, CUtensorMap* tm_w, CUtensorMap* tm_x);

// The expert GEMM's shared-memory opt-in, before the call's first launch: every step that can
// fail runs before anything touches the caller's buffers or the workspace.
// Token rows: *ctas gets the CTAs the core's launch will run (MoeConfig::grid, or all resident).
cudaError_t gemm_opt_in(const Prepared& r, const FusedMoeArgs& a, int* ctas) {
  if (r.cfg.token_rows == 1) {
    int resident = 0;
    const cudaError_t e = blockscaled::kBsVariantLaunchers[r.core_line]().resident(1, r.dev->device, &resident);
    *ctas = hopper::persistent_grid(r.cfg.grid, resident, 0, 1, /*oversubscribe=*/true);
    return e;
  }
  if (r.cfg.tiny == 1)
    return a.topk_ids || a.logits_type == OutType::kFP32 ? tiny_opt_in<float>() : tiny_opt_in<__nv_bfloat16>();
  return find_gemm(r.cfg.token_tile)->opt_in();
}

Status prepare(const char* who, const FusedMoeArgs& a, void* workspace, size_t workspace_bytes,
               const MoeConfig* forced, Prepared* out) {
  const std::string w(who);
  LOWBIT_RETURN_IF_ERROR(check_shape(who, a.shape));
  if (forced) LOWBIT_RETURN_IF_ERROR(check_config(who, *forced));
  // A subnormal softcap's reciprocal is inf in the router (x * inf = NaN for x = 0).
  if (!std::isfinite(a.softcap) || a.softcap < 0.0f || (a.softcap > 0.0f && a.softcap < FLT_MIN))
    return Status::Invalid(w + ": softcap must be 0 (none) or a finite normal float > 0");
  if ((a.topk_ids == nullptr) != (a.topk_weights == nullptr))
    return Status::Invalid(w + ": pass both topk_ids and topk_weights, or neither (route from logits)");
  if (a.logits_type != OutType::kFP32 && a.logits_type != OutType::kBF16)
    return Status::Invalid(w + ": logits must be FP32 or BF16");
  if (a.y_type != OutType::kFP32 && a.y_type != OutType::kBF16) return Status::Invalid(w + ": y must be FP32 or BF16");
  if (a.reduce != MoeReduce::kAtomic && a.reduce != MoeReduce::kDeterministic)
    return Status::Invalid(w + ": unknown reduce mode");
  check::ArgCheck c(who);
  if (a.shape.m > 0) {
    // m = 0 reads and writes nothing: its pointers may be anything.
    using check::extent;
    using check::Null;
    const MoeShape& s = a.shape;
    c.rule(!a.topk_ids && !a.logits, [] { return std::string("logits are null and no routing was given"); })
        .ptr("logits", a.topk_ids ? nullptr : a.logits, 4, Null::kAllowed,
             extent(s.m, s.experts, a.logits_type == OutType::kBF16 ? 2 : 4))
        // No extent: a caller that runs stages alone may hand back the workspace's own routing
        // (moe_workspace_view), which no stage writes once routing is given.
        .ptr("topk_ids", a.topk_ids, 4, Null::kAllowed)
        .ptr("topk_weights", a.topk_weights, 4, Null::kAllowed)
        .ptr("x", a.x, 16, Null::kRefused, extent(s.m, s.k, 2))
        .ptr("w", a.w, 16, Null::kRefused, extent(s.experts, s.n, s.k))
        .ptr("w_scales", a.w_scales, 4, Null::kRefused, extent(s.experts, check::ceil_div(s.n, 128), s.k / 128, 4))
        .out("y", a.y, 16, extent(s.m, s.n, a.y_type == OutType::kBF16 ? 2 : 4));
  }
  c.out("workspace", workspace, 256, check::extent_of(workspace_bytes))
      .rule(workspace_bytes < fused_moe_workspace_size(a.shape, a.reduce, a.y_type), StatusCode::kWorkspaceTooSmall,
            [&] {
              return "this shape needs " + std::to_string(fused_moe_workspace_size(a.shape, a.reduce, a.y_type)) +
                     " bytes of workspace, got " + std::to_string(workspace_bytes);
            });
  Prepared& r = *out;
  r.s = a.shape;
  LOWBIT_RETURN_IF_ERROR(c.device(&r.dev));
  r.cfg = choose(a.shape, a.reduce, r.dev->sm_count, forced, nullptr);
  // m = 0 launches nothing on any path: a forced tiny path has nothing to refuse.
  if (a.shape.m == 0) r.cfg.tiny = 0;
  if (r.cfg.tiny == 1 && (!tiny_applies(a.shape, a.reduce) || r.cfg.token_tile != moe::kTinyTokenTile))
    return Status::Invalid(w + ": the tiny-batch path needs atomic mode, m <= " + std::to_string(moe::kTinyMaxTokens) +
                           ", m * top_k <= " + std::to_string(moe::kTinyMaxPairs) + ", experts <= " +
                           std::to_string(32 * moe::kTinyRouteLanes) + " and token tile 16");
  if (r.cfg.token_rows == 1) r.core_line = core_line(r.cfg.block_n);
  const int need_smem = gemm_smem_bytes(r.cfg.token_tile, r.cfg.token_rows == 1, r.cfg.block_n);
  if (static_cast<size_t>(need_smem) > r.dev->smem_per_block_optin)
    return Status::Error(StatusCode::kUnsupportedDevice, w + ": the expert GEMM needs " + std::to_string(need_smem) +
                                                             " bytes of shared memory per block; the device allows " +
                                                             std::to_string(r.dev->smem_per_block_optin));
  r.layout = moe::workspace_layout(a.shape, a.reduce, a.y_type);
  uint8_t* base = static_cast<uint8_t*>(workspace);
  MoeParams& p = r.p;
  p = MoeParams{};
  p.m = a.shape.m;
  p.n = a.shape.n;
  p.k = a.shape.k;
  p.experts = a.shape.experts;
  p.top_k = a.shape.top_k;
  p.kblocks = a.shape.k / 128;
  p.nblocks = (a.shape.n + 127) / 128;
  p.unit_nblocks = r.cfg.token_rows == 1 ? (a.shape.n + r.cfg.block_n - 1) / r.cfg.block_n : p.nblocks;
  p.token_tile = r.cfg.token_tile;
  p.splits = r.cfg.splits;
  p.rows = r.layout.rows;
  p.deterministic = a.reduce == MoeReduce::kDeterministic;
  p.y_fp32 = a.y_type == OutType::kFP32;
  p.status = reinterpret_cast<int*>(base + r.layout.status);
  p.ids = a.topk_ids ? a.topk_ids : reinterpret_cast<const int32_t*>(base + r.layout.ids);
  p.weights = a.topk_weights ? a.topk_weights : reinterpret_cast<const float*>(base + r.layout.weights);
  p.counts = reinterpret_cast<int32_t*>(base + r.layout.counts);
  p.offsets = reinterpret_cast<int32_t*>(base + r.layout.offsets);
  p.cursor = reinterpret_cast<int32_t*>(base + r.layout.cursor);
  p.tile_start = reinterpret_cast<int32_t*>(base + r.layout.tile_start);
  p.row_pair = reinterpret_cast<int32_t*>(base + r.layout.row_pair);
  p.row_weight = reinterpret_cast<float*>(base + r.layout.row_weight);
  p.x_scales = reinterpret_cast<float*>(base + r.layout.x_scales);
  p.xq = base + r.layout.xq;
  p.sums = r.layout.sum_floats > 0 ? reinterpret_cast<float*>(base + r.layout.sums) : nullptr;
  p.y = a.y;
  p.w = static_cast<const uint8_t*>(a.w);
  p.w_scales = a.w_scales;
  p.tile_prefetch = r.cfg.tile_prefetch != 0;
  if (a.shape.m > 0) {
    LOWBIT_RETURN_IF_ERROR(make_gemm_maps(a, r, &r.tm_w, &r.tm_x));
    int ctas = 0;
    const cudaError_t e = gemm_opt_in(r, a, &ctas);
    if (e != cudaSuccess) return gemm::cuda_error(w + ": the expert GEMM's shared-memory opt-in", e);
    p.tail_grid = r.cfg.token_rows == 1 && r.cfg.tail_split > 0 ? ctas : 0;
    p.tail_min_part = r.cfg.tail_split;
  }
  return Status::Ok();
}

int route_lanes(int experts) {
  static_assert(moe::kMaxExperts <= 32 * 16, "the routing warp holds 16 logits per lane");
  return experts <= 32 ? 1 : experts <= 64 ? 2 : experts <= 128 ? 4 : experts <= 256 ? 8 : 16;
}

// Calls f(LogitT{}, std::integral_constant<int, kPerLane>{}) for the shape's routing variant.
template <class F>
void with_route_variant(OutType logits_type, int experts, F&& f) {
  auto by_lane = [&](auto tag) {
    switch (route_lanes(experts)) {
      case 1: f(tag, std::integral_constant<int, 1>{}); break;
      case 2: f(tag, std::integral_constant<int, 2>{}); break;
      case 4: f(tag, std::integral_constant<int, 4>{}); break;
      case 8: f(tag, std::integral_constant<int, 8>{}); break;
      default: f(tag, std::integral_constant<int, 16>{}); break;
    }
  };
  if (logits_type == OutType::kBF16) by_lane(__nv_bfloat16{});
  else by_lane(float{});
}

Status run_route(const FusedMoeArgs& a, const Prepared& r, void* workspace, cudaStream_t stream, bool pdl) {
  if (a.topk_ids) return Status::Ok();  // the caller routed
  uint8_t* base = static_cast<uint8_t*>(workspace);
  int32_t* ids = reinterpret_cast<int32_t*>(base + r.layout.ids);
  float* weights = reinterpret_cast<float*>(base + r.layout.weights);
  const int blocks = (r.s.m + moe::kRouteWarps - 1) / moe::kRouteWarps;
  const uint64_t w_bytes = static_cast<uint64_t>(r.s.experts) * r.s.n * r.s.k;
  const moe::RoutePrefetch pf{static_cast<const uint8_t*>(a.w),
                              std::min<uint64_t>(w_bytes, static_cast<uint64_t>(r.cfg.prefetch_mb) << 20)};
  const int grid = blocks + (pf.bytes > 0 ? r.dev->sm_count : 0);
  cudaError_t e = cudaSuccess;
  with_route_variant(a.logits_type, r.s.experts, [&](auto tag, auto per_lane) {
    using LogitT = decltype(tag);
    e = hopper::launch_kernel(moe::route_kernel<LogitT, decltype(per_lane)::value>, grid, 32 * moe::kRouteWarps, 0,
                              stream, pdl, static_cast<const LogitT*>(a.logits), r.s.m, r.s.experts, r.s.top_k,
                              a.softcap, a.renormalize, ids, weights, pf);
  });
  return e == cudaSuccess ? Status::Ok() : gemm::cuda_error("moe route launch", e);
}

// The weights [experts * n, k] in boxes of 128 rows (block_n on the core) x 128; the sorted
// activations in token-tile boxes (swap-AB and the tiny path: the token-rows GEMM gathers its rows
// from the tokens and never loads this map).
Status make_gemm_maps(const FusedMoeArgs& a, const Prepared& r, CUtensorMap* tm_w, CUtensorMap* tm_x) {
  const MoeShape& s = r.s;
  hopper::TensorMap2dSpec wspec;
  wspec.base = a.w;
  wspec.rows = static_cast<uint64_t>(s.experts) * s.n;
  wspec.cols = static_cast<uint64_t>(s.k);
  wspec.row_stride_bytes = static_cast<uint64_t>(s.k);
  wspec.box_rows = r.cfg.token_rows == 1 ? static_cast<uint32_t>(r.cfg.block_n) : 128u;
  wspec.box_cols = 128;
  hopper::TensorMap2dSpec xspec = wspec;
  xspec.base = r.p.xq;
  xspec.rows = static_cast<uint64_t>(r.layout.rows);
  xspec.box_cols = 128;
  xspec.box_rows = static_cast<uint32_t>(r.cfg.token_tile);
  LOWBIT_RETURN_IF_ERROR(hopper::make_tensor_map_2d(wspec, tm_w));
  return hopper::make_tensor_map_2d(xspec, tm_x);
}

// The token-rows GEMM on the block-scaled core: stacked problems over the expert-sorted routing
// pairs (expert e owns counts[e] sorted rows from offsets[e], its weights rows [e * n, (e + 1) * n)
// of W), each sorted row r gathered from its token row_pair[r] / top_k of the token-major xq (the
// quantize stage wrote each token once), and the row scatter: sorted row r adds row_weight[r]
// times its result into that token's row of the FP32 sums (atomic mode), or stores it as pair row
// row_pair[r] (deterministic mode). Its units are the layout stage's tile_start (128-token tiles x
// unit_nblocks column tiles per expert), the last partial wave's cut along K in atomic mode (the
// plan after tile_start, gemm::TailPlan).
Status run_core_gemm(const Prepared& r, cudaStream_t stream) {
  const MoeParams& m = r.p;
  gemm::KernelParams p{};
  p.sched.splits = 1;
  p.sched.group_m = 8;
  p.set_problem(m.rows, m.n, m.k, 128, 1.0f, nullptr, nullptr);
  p.epi.row_period = 1;
  p.bs = {m.x_scales, m.m, m.w_scales, m.kblocks, 0};  // the tokens' scales; no grouped A scales (a_scale_group)
  p.groups = {nullptr, m.experts, m.tile_start, nullptr};
  p.stacked = {m.counts, m.offsets};
  p.gather = {m.xq, m.row_pair, m.top_k, r.cfg.weights_evict_first == 1};
  float* sums = m.deterministic || !m.y_fp32 ? m.sums : static_cast<float*>(m.y);
  p.scatter = {m.row_pair, m.row_weight, sums, m.n, m.deterministic ? 1 : m.top_k, !m.deterministic};
  int launched = 0;
  const cudaError_t e = blockscaled::kBsVariantLaunchers[r.core_line]().launch(
      r.cfg.grid, 0, stream, r.tm_x, r.tm_w, r.tm_x, r.tm_x, r.tm_x, p, r.dev->device, &launched);
  return gemm::launch_status(
      e, [&] { return "moe expert gemm (block-scaled core, stacked) bn=" + std::to_string(r.cfg.block_n); }, launched,
      -1);
}

Status run_gemm(const Prepared& r, cudaStream_t stream, bool pdl) {
  if (r.cfg.token_rows == 1) return run_core_gemm(r, stream);
  const MoeShape& s = r.s;
  const CUtensorMap& tm_w = r.tm_w;
  const CUtensorMap& tm_x = r.tm_x;
  // Units exist only on the device; this bounds them: at most min(experts, pairs) experts have
  // a partial token tile, the other tiles are full.
  const int64_t pairs = static_cast<int64_t>(s.m) * s.top_k;
  const int64_t max_units = (std::min<int64_t>(s.experts, pairs) + pairs / r.cfg.token_tile) * r.p.nblocks * r.p.splits;
  const int ctas = static_cast<int>(std::min<int64_t>(r.cfg.grid > 0 ? r.cfg.grid : r.dev->sm_count, max_units));
  const cudaError_t e = find_gemm(r.cfg.token_tile)->launch(ctas, stream, pdl, tm_w, tm_x, r.p);
  const auto describe = [&] {
    return "moe expert gemm token tile " + std::to_string(r.cfg.token_tile) + ", splits " + std::to_string(r.p.splits);
  };
  return gemm::launch_status(e, describe, ctas, -1);
}

// Whether a call's first kernel launches with PDL (MoeConfig::pdl_first; only with pdl=1).
bool first_kernel_pdl(const MoeConfig& c) { return c.pdl == 1 && c.pdl_first == 1; }

// The tiny-batch path's two kernels: zero Y + quantize X, then the GEMM that routes for itself;
// both with PDL (config pdl=1), the first one too unless pdl_first=0 (see fused_moe_fp8).
Status run_tiny(const FusedMoeArgs& a, const Prepared& r, void* workspace, cudaStream_t stream) {
  const MoeShape& s = r.s;
  cudaError_t e = hopper::launch_kernel(moe::tiny_prepare_kernel, s.m, moe::kGatherThreads, 0, stream,
                                        first_kernel_pdl(r.cfg),
                                        static_cast<const __nv_bfloat16*>(a.x), r.p);
  if (e != cudaSuccess) return gemm::cuda_error("moe tiny prepare launch", e);
  const CUtensorMap& tm_w = r.tm_w;
  const CUtensorMap& tm_x = r.tm_x;
  const int64_t max_units = std::min<int64_t>(s.experts, static_cast<int64_t>(s.m) * s.top_k) * r.p.nblocks * r.p.splits;
  const int ctas = static_cast<int>(std::min<int64_t>(r.cfg.grid > 0 ? r.cfg.grid : r.dev->sm_count, max_units));
  uint8_t* base = static_cast<uint8_t*>(workspace);
  int32_t* ids = a.topk_ids ? nullptr : reinterpret_cast<int32_t*>(base + r.layout.ids);
  float* weights = a.topk_ids ? nullptr : reinterpret_cast<float*>(base + r.layout.weights);
  if (a.topk_ids || a.logits_type == OutType::kFP32)
    e = launch_tiny_gemm(ctas, stream, tm_w, tm_x, r.cfg.pdl == 1,
                         a.topk_ids ? nullptr : static_cast<const float*>(a.logits),
                         a.softcap, a.renormalize, ids, weights, r.p);
  else
    e = launch_tiny_gemm(ctas, stream, tm_w, tm_x, r.cfg.pdl == 1, static_cast<const __nv_bfloat16*>(a.logits), a.softcap,
                         a.renormalize, ids, weights, r.p);
  return e == cudaSuccess ? Status::Ok() : gemm::cuda_error("moe tiny expert gemm launch", e);
}

bool needs_finish(const FusedMoeArgs& a) { return a.reduce == MoeReduce::kDeterministic || a.y_type == OutType::kBF16; }

// Whether the stage launches a kernel for these arguments.
bool stage_launches(MoeStage stage, const FusedMoeArgs& a) {
  if (a.shape.m == 0) return false;
  if (stage == MoeStage::kRoute) return a.topk_ids == nullptr;
  if (stage == MoeStage::kFinish) return needs_finish(a);
  return true;
}

Status run_stage(MoeStage stage, const FusedMoeArgs& a, const Prepared& r, void* workspace, cudaStream_t stream,
                 bool pdl) {
  if (!stage_launches(stage, a)) return Status::Ok();
  cudaError_t e = cudaSuccess;
  switch (stage) {
    case MoeStage::kRoute: return run_route(a, r, workspace, stream, pdl);
    case MoeStage::kLayout:
      e = hopper::launch_kernel(moe::layout_kernel, 1, moe::kLayoutThreads, 0, stream, pdl, r.p);
      break;
    case MoeStage::kQuantizeGather:
      // The token-rows GEMM gathers its rows itself: each token is quantized once, to its own row.
      e = r.cfg.token_rows == 1
              ? hopper::launch_kernel(moe::quantize_gather_kernel<true>, r.s.m, moe::kGatherThreads, 0, stream, pdl,
                                      static_cast<const __nv_bfloat16*>(a.x), r.p)
              : hopper::launch_kernel(moe::quantize_gather_kernel<false>, r.s.m, moe::kGatherThreads, 0, stream, pdl,
                                      static_cast<const __nv_bfloat16*>(a.x), r.p);
      break;
    case MoeStage::kExpertGemm: return run_gemm(r, stream, pdl);
    case MoeStage::kFinish: {
      const int64_t quads = static_cast<int64_t>(r.s.m) * (r.s.n / 4);
      e = hopper::launch_kernel(moe::finish_kernel,
                                static_cast<unsigned>((quads + moe::kFinishThreads - 1) / moe::kFinishThreads),
                                moe::kFinishThreads, 0, stream, pdl, r.p);
      break;
    }
  }
  return e == cudaSuccess ? Status::Ok() : gemm::cuda_error("moe stage launch", e);
}

}  // namespace

std::string MoeConfig::to_string() const {
  return "tile=" + std::to_string(token_tile) + ",splits=" + std::to_string(splits) + ",grid=" + std::to_string(grid) +
         ",prefetch=" + std::to_string(prefetch_mb) + ",tileprefetch=" + std::to_string(tile_prefetch) +
         ",pdl=" + std::to_string(pdl) + ",tiny=" + std::to_string(tiny) + ",pdlfirst=" + std::to_string(pdl_first) +
         ",rows=" + std::to_string(token_rows) + ",bn=" + std::to_string(block_n) +
         ",wfirst=" + std::to_string(weights_evict_first) + ",tail=" + std::to_string(tail_split);
}

Status parse_moe_config(const std::string& text, MoeConfig* out) {
  if (!out) return Status::Invalid("parse_moe_config: out must be non-null");
  MoeConfig c;
  LOWBIT_RETURN_IF_ERROR(parse_int_items(text, [&c](const std::string& key, int value) {
    if (key == "tile") c.token_tile = value;
    else if (key == "splits") c.splits = value;
    else if (key == "grid") c.grid = value;
    else if (key == "prefetch") c.prefetch_mb = value;
    else if (key == "tileprefetch") c.tile_prefetch = value;
    else if (key == "pdl") c.pdl = value;
    else if (key == "tiny") c.tiny = value;
    else if (key == "pdlfirst") c.pdl_first = value;
    else if (key == "rows") c.token_rows = value;
    else if (key == "bn") c.block_n = value;
    else if (key == "wfirst") c.weights_evict_first = value;
    else if (key == "tail") c.tail_split = value;
    else return Status::Invalid("unknown MoE config key '" + key +
                                "' (tile, splits, grid, prefetch, tileprefetch, pdl, tiny, pdlfirst, rows, bn, wfirst, tail)");
    return Status::Ok();
  }));
  LOWBIT_RETURN_IF_ERROR(check_config("parse_moe_config", c));
  *out = c;
  return Status::Ok();
}

namespace {

// The largest k at which the token-rows GEMM marks the weights' L2 lines first to evict: measured
// faster at k = 768, 1408 and 2048, slower at 7168; between them it is untested and keeps the
// default policy (docs/perf.md W6 v8).
constexpr int kWeightsEvictFirstMaxK = 2048;

// The selection table (moe_config_table prints it). avg = m * top_k / experts, the tokens an
// expert sees on average.
MoeConfig choose(const MoeShape& s, MoeReduce reduce, int sm_count, const MoeConfig* forced, std::string* reason) {
  MoeConfig c = forced ? *forced : MoeConfig{};
  std::string why;
  const double pairs = static_cast<double>(s.m) * s.top_k;
  const double avg = s.experts > 0 ? pairs / s.experts : 0.0;
  // Tokens as the MMA's rows (128-token tiles, per-row X scales) from 64 tokens per expert on
  // average: 1.6-4.4% faster than swap-AB at 64-256 (docs/perf.md W6 v5). Not the tiny path, and
  // not where a forced token tile says otherwise.
  if (c.token_rows < 0) {
    c.token_rows = avg >= 64 && c.tiny != 1 && (c.token_tile == 0 || c.token_tile == 128) && c.splits <= 1 ? 1 : 0;
    if (c.token_rows == 1) why += "rows=1: >= 64 tokens per expert on average, the tokens as the MMA's rows (the core); ";
  } else if (c.token_rows == 1) {
    why += "rows=1 forced: the tokens as the MMA's rows (the core); ";
  }
  // The token-rows GEMM gathers its rows at 32-bit byte offsets into the quantized tokens
  // (gemm::produce_gathered_rows): beyond 4 GiB of them it is not taken, even when forced.
  if (c.token_rows == 1 && static_cast<uint64_t>(s.m) * static_cast<uint64_t>(s.k) > (1ull << 32)) {
    c.token_rows = 0;
    c.block_n = 0;
    why += "rows=0: m * k past 4 GiB, beyond the gathered rows' 32-bit offsets; ";
  }
  if (c.token_rows == 1) {
    c.token_tile = 128;
    c.tiny = 0;
    if (c.block_n == 0) {
      c.block_n = 256;
      why += "bn=256: the widest core tile; ";
    }
    // The weights are streamed: each weight tile is read by its expert's token tiles at about the
    // same time and never again, while the quantized tokens are gathered again by every column tile
    // and every expert that takes the token. Marking the weights' lines first to evict is meant to
    // keep the tokens in L2. Measured: level to 9% faster at k = 768-2048 (most at N = 512; the
    // suite's shapes and two held-out models' up and down projections), 3-5% slower at k = 7168,
    // for a reason not found (docs/perf.md W6 v8).
    const std::string max_k = std::to_string(kWeightsEvictFirstMaxK);
    if (c.weights_evict_first < 0) {
      c.weights_evict_first = s.k <= kWeightsEvictFirstMaxK ? 1 : 0;
      why += c.weights_evict_first ? "wfirst=1: k <= " + max_k + ", the weights' L2 lines evicted first; "
                                   : "wfirst=0: k > " + max_k + " (evicting the weights first measured slower at k = 7168); ";
    } else {
      why += "wfirst forced; ";
    }
    // The last partial wave's tiles cut along K: their parts add into the sums (atomic mode only),
    // each part at least kTailMinPartAuto K blocks. Measured with parts of any length at four
    // routings each: 0.9-2.2% faster at k = 7168 (parts of 28 and 19 K blocks), -1.1% to +0.7% at
    // k = 2048 (parts of 8 and 5); with the floor, 3.0% at k = 7168 and 4.9% at k = 14336 (held
    // out), k <= 2048 not cut (docs/perf.md W6 v9).
    if (reduce == MoeReduce::kDeterministic) {
      if (c.tail_split > 0) why += "tail=0: deterministic mode stores each pair's row once; ";
      c.tail_split = 0;
    } else if (c.tail_split < 0) {
      c.tail_split = kTailMinPartAuto;
      why += "tail=" + std::to_string(kTailMinPartAuto) + ": the last partial wave's tiles cut along K into parts of " +
             std::to_string(kTailMinPartAuto) + "+ K blocks; ";
    } else {
      why += "tail forced; ";
    }
  } else {
    c.weights_evict_first = 0;
    c.tail_split = 0;
  }
  if (c.token_tile == 0) {
    c.token_tile = moe::kMoeVariantSpecs[moe::kNumMoeVariantSpecs - 1].tokens;
    for (const auto& v : moe::kMoeVariantSpecs)
      if (avg <= v.tokens) {
        c.token_tile = v.tokens;
        break;
      }
    why += "tile=" + std::to_string(c.token_tile) + ": smallest token tile >= the average tokens per expert (" +
           std::to_string(avg) + "); ";
  } else {
    why += "tile forced; ";
  }
  if (c.token_rows == 1) {
    c.splits = 1;
    why += "splits=1: the core runs unsplit";
  } else if (c.splits == 0) {
    const int kblocks = s.k / 128;
    const double active = std::min<double>(s.experts, pairs);
    const double units = active * std::max(1.0, std::ceil(avg / c.token_tile)) * ((s.n + 127) / 128);
    c.splits = 1;
    if (reduce == MoeReduce::kAtomic) {
      while (c.splits < 4 && units * c.splits < sm_count && kblocks >= 2 * c.splits) c.splits *= 2;
    }
    why += "splits=" + std::to_string(c.splits) +
           (reduce == MoeReduce::kDeterministic ? ": deterministic mode never splits K"
                                                : ": K split until the ~" + std::to_string(static_cast<int>(units)) +
                                                      " tiles cover the " + std::to_string(sm_count) + " SMs (max 4)");
  } else {
    if (reduce == MoeReduce::kDeterministic) c.splits = 1;
    why += "splits forced" + std::string(reduce == MoeReduce::kDeterministic ? " (1: deterministic)" : "");
  }
  // Both L2 prefetches measured no gain at the seed's shape (docs/perf.md, W6): off unless forced.
  if (c.prefetch_mb < 0) c.prefetch_mb = 0;
  if (c.tile_prefetch < 0) c.tile_prefetch = 0;
  if (c.pdl < 0) c.pdl = 1;
  if (c.tiny == 1 && reduce == MoeReduce::kDeterministic) {
    c.tiny = 0;  // like splits: a forced config serves both modes, and this path only adds atomically
    why += "; tiny forced, 0: deterministic mode";
  }
  if (c.tiny < 0) {
    c.tiny = tiny_applies(s, reduce) && c.token_tile == moe::kTinyTokenTile;
    why += std::string("; tiny=") + (c.tiny ? "1: a few tokens; every GEMM CTA routes them itself and streams its "
                                              "weights before the zero+quantize kernel is done"
                                            : "0");
  }
  if (c.pdl_first < 0) {
    c.pdl_first = c.tiny == 1 ? 1 : 0;
    why += std::string("; pdlfirst=") + (c.pdl_first ? "1: the tiny path's first kernel waits resident" : "0");
  }
  // Every K range must hold at least one K block (an empty range would leave its consumers
  // waiting for a stage that is never loaded).
  if (c.splits > s.k / 128 && s.k >= 128) {
    c.splits = s.k / 128;
    why += " (clamped to the " + std::to_string(c.splits) + " K blocks)";
  }
  if (reason) *reason = why;
  return c;
}

}  // namespace

Status choose_moe_config(const MoeShape& shape, MoeReduce reduce, int sm_count, const MoeConfig* forced,
                         MoeConfig* out, std::string* reason) {
  const char* who = "choose_moe_config";
  if (!out) return Status::Invalid(std::string(who) + ": out must be non-null");
  LOWBIT_RETURN_IF_ERROR(check_shape(who, shape));
  if (reduce != MoeReduce::kAtomic && reduce != MoeReduce::kDeterministic)
    return Status::Invalid(std::string(who) + ": unknown reduce mode");
  if (sm_count < 1) return Status::Invalid(std::string(who) + ": sm_count must be >= 1 (got " + std::to_string(sm_count) + ")");
  if (forced) LOWBIT_RETURN_IF_ERROR(check_config(who, *forced));
  *out = choose(shape, reduce, sm_count, forced, reason);
  return Status::Ok();
}

MoeConfig moe_choose_config(const MoeShape& shape, MoeReduce reduce, int sm_count, const MoeConfig* forced,
                            std::string* reason) {
  MoeConfig out;
  std::string why;
  const Status st = choose_moe_config(shape, reduce, sm_count, forced, &out, &why);
  if (st.ok()) {
    if (reason) *reason = why;
    return out;
  }
  // Refused: never a config with the caller's bad fields in it (a tile of 7, a grid of -5). For
  // a good shape, the automatic choice; for a bad one (whose sizes the rules cannot even add up
  // safely), the smallest tile, unsplit. The refusal is the reason.
  const bool shape_ok = check_shape("moe_choose_config", shape).ok() &&
                        (reduce == MoeReduce::kAtomic || reduce == MoeReduce::kDeterministic);
  if (shape_ok) {
    out = choose(shape, reduce, sm_count > 0 ? sm_count : 1, nullptr, &why);
  } else {
    out = MoeConfig{};
    out.token_tile = 16;
    out.splits = 1;
    out.prefetch_mb = 0;
    out.tile_prefetch = 0;
    out.pdl = 1;
    out.tiny = 0;
    out.pdl_first = 0;
    out.token_rows = 0;
    out.block_n = 0;
    out.weights_evict_first = 0;
    out.tail_split = 0;
    why = "defaults";
  }
  if (reason) *reason = st.message() + "; " + (shape_ok ? "the automatic choice instead: " : "") + why;
  return out;
}

std::string moe_config_table() {
  return "MoE expert GEMM config (avg = m * top_k / experts tokens per expert)\n"
         "  token tile 16  | avg <= 16  | swap-AB WGMMA N; smaller tiles waste no tensor-core work on padding\n"
         "  token tile 32  | avg <= 32  |\n"
         "  token tile 64  | avg <= 64  |\n"
         "  token tile 128 | avg > 64   | fewest re-reads of each weight tile from L2\n"
         "  rows 1         | avg >= 64  | tokens as the MMA's rows (128-token tiles) on the block-scaled core: two X\n"
         "                 |            | scales per thread, not N / 4 per K block; unsplit; each token quantized\n"
         "                 |            | once and its rows gathered in the GEMM's A load (m * k <= 4 GiB)\n"
         "  bn 256         | rows 1     | the core's widest tile: each token tile's X read from L2 half as often\n"
         "  wfirst 1       | rows 1, k <= 2048 | the weights' L2 lines evicted first, so the gathered tokens stay\n"
         "                 |            | (level to 9% faster; 3-5% slower at k = 7168, so not there)\n"
         "  tail 16        | rows 1, atomic | the last partial wave's tiles cut into up to 4 K parts of 16+ K\n"
         "                 |            | blocks that add into the sums, so the wave ends sooner (1-3% at\n"
         "                 |            | k = 7168, 5% at 14336; shorter parts gained nothing; deterministic: 0)\n"
         "  splits 2 / 4   | atomic mode, fewer tiles than SMs | idle SMs would leave HBM bandwidth unused (M = 1)\n"
         "  splits 1       | deterministic mode, or enough tiles | a fixed summation order needs one writer per row\n"
         "  tiny 1         | atomic, m <= 4, m * top_k <= 32, experts <= 256 | routing inside the GEMM: its weight\n"
         "                 |                                 | loads start before the zero+quantize kernel ends\n"
         "  pdl 1          | always | each stage's launch and prologue overlap the previous stage's tail\n"
         "  pdlfirst 1     | tiny path | its first kernel waits resident under the caller's last kernel\n"
         "  pdlfirst 0     | split path | launched early, the route kernel measured 5% slower (M = 128)\n"
         "  prefetch 0, tileprefetch 0 | always | L2 prefetch of the first experts during routing, or of each unit's\n"
         "                 |                                 | whole weight tile, measured no gain or a loss (docs/perf.md W6)\n";
}

size_t fused_moe_workspace_size(const MoeShape& shape, MoeReduce reduce, OutType y_type) {
  if (!check_shape("fused_moe_workspace_size", shape).ok()) return 0;
  return moe::workspace_layout(shape, reduce, y_type).total;
}

Status moe_workspace_view(const MoeShape& s, MoeReduce reduce, OutType y_type, void* workspace, size_t workspace_bytes,
                          MoeWorkspaceView* out) {
  LOWBIT_RETURN_IF_ERROR(check_shape("moe_workspace_view", s));
  if (!workspace || !out) return Status::Invalid("moe_workspace_view: null workspace or output");
  const moe::Layout l = moe::workspace_layout(s, reduce, y_type);
  if (workspace_bytes < l.total) return Status::Error(StatusCode::kWorkspaceTooSmall, "moe_workspace_view: workspace too small");
  uint8_t* b = static_cast<uint8_t*>(workspace);
  *out = MoeWorkspaceView{reinterpret_cast<int32_t*>(b + l.ids),        reinterpret_cast<float*>(b + l.weights),
                          reinterpret_cast<int32_t*>(b + l.counts),     reinterpret_cast<int32_t*>(b + l.offsets),
                          reinterpret_cast<int32_t*>(b + l.tile_start), b + l.xq,
                          reinterpret_cast<float*>(b + l.x_scales),     reinterpret_cast<int32_t*>(b + l.row_pair),
                          reinterpret_cast<float*>(b + l.row_weight),   l.rows,
                          reinterpret_cast<int32_t*>(b + l.status)};
  return Status::Ok();
}

Status moe_run_stage(MoeStage stage, const FusedMoeArgs& args, void* workspace, size_t workspace_bytes,
                     cudaStream_t stream, const MoeConfig* config) {
  if (static_cast<int>(stage) < static_cast<int>(MoeStage::kRoute) ||
      static_cast<int>(stage) > static_cast<int>(MoeStage::kFinish))
    return Status::Invalid("moe_run_stage: unknown stage " + std::to_string(static_cast<int>(stage)));
  Prepared r;
  LOWBIT_RETURN_IF_ERROR(prepare("moe_run_stage", args, workspace, workspace_bytes, config, &r));
  return run_stage(stage, args, r, workspace, stream, false);
}

Status fused_moe_fp8(const FusedMoeArgs& args, void* workspace, size_t workspace_bytes, cudaStream_t stream,
                     const MoeConfig* config) {
  Prepared r;
  LOWBIT_RETURN_IF_ERROR(prepare("fused_moe_fp8", args, workspace, workspace_bytes, config, &r));
  static constexpr MoeStage kSplit[] = {MoeStage::kRoute, MoeStage::kLayout, MoeStage::kQuantizeGather,
                                        MoeStage::kExpertGemm, MoeStage::kFinish};
  // Each kernel reads and writes no global memory before its grid-dependency wait (the route
  // stage's optional L2 prefetch of the weights is a hint, not a read), which returns once its
  // predecessor -- the caller's last kernel, for the first one -- has completed, so any of them
  // may launch with PDL and the chain stays ordered after the caller's work. By default
  // (MoeConfig::pdl_first) the tiny path's first kernel does: it is resident and waiting before
  // that kernel ends, which hides its launch (M = 1: 12.1 -> 11.2 us). The split pipeline's does
  // not: launched early, M = 128 ran 111.3 us against 105.8 (same-machine A/B, docs/perf.md W6 v3).
  bool first = true;
  auto run = [&](MoeStage st) {
    const bool launches = stage_launches(st, args);
    const Status status = run_stage(st, args, r, workspace, stream, first ? first_kernel_pdl(r.cfg) : r.cfg.pdl == 1);
    first = first && !launches;
    return status;
  };
  if (r.cfg.tiny == 1) {
    LOWBIT_RETURN_IF_ERROR(run_tiny(args, r, workspace, stream));
    first = false;
    LOWBIT_RETURN_IF_ERROR(run(MoeStage::kFinish));
  } else {
    for (MoeStage st : kSplit) LOWBIT_RETURN_IF_ERROR(run(st));
  }
  return Status::Ok();
}

Status moe_check_status(const MoeShape& s, MoeReduce reduce, OutType y_type, const void* workspace,
                        size_t workspace_bytes, cudaStream_t stream) {
  LOWBIT_RETURN_IF_ERROR(check_shape("moe_check_status", s));
  if (!workspace) return Status::Invalid("moe_check_status: null workspace");
  const moe::Layout l = moe::workspace_layout(s, reduce, y_type);
  if (workspace_bytes < l.total) return Status::Error(StatusCode::kWorkspaceTooSmall, "moe_check_status: workspace too small");
  // No token, no routing pair: nothing can be wrong, and no stage wrote the status word.
  if (s.m == 0) return Status::Ok();
  int host[2] = {0, -1};
  LOWBIT_RETURN_IF_ERROR(gemm::read_back("moe_check_status", static_cast<const uint8_t*>(workspace) + l.status, host,
                                         sizeof(host), stream));
  if (host[0] == moe::kMoeOk) return Status::Ok();
  return Status::Invalid("fused_moe_fp8: routing pair " + std::to_string(host[1]) + " (token " +
                         std::to_string(host[1] / s.top_k) + ", slot " + std::to_string(host[1] % s.top_k) +
                         "): " + moe::moe_error_text(host[0]));
}

}  // namespace lowbit
