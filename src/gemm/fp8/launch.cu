// Host side of the FP8 GEMM: argument checks, config choice, tensor maps, launch.
// Stream-ordered; no allocation and no synchronization.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <string>

#include "common/choice_cache.h"
#include "common/device_cache.h"
#include "gemm/core/traits.cuh"
#include "gemm/fp8/config.h"
#include "gemm/fp8/fp8_variants_gen.h"
#include "gemm/fp8/variant_table.h"
#include "gemm/fp8/variants.h"
#include "gemm/launch_common.h"
#include "hopper/cluster_launch.h"
#include "hopper/tensor_map.h"
#include "lowbit/device.h"
#include "lowbit/gemm.h"

namespace lowbit {
namespace {

using gemm::KernelParams;

int out_bytes(OutType t) { return t == OutType::kFP32 ? 4 : 2; }

// Per-row scales and FP16 output: the staged epilogue's (the fused one has no room for them).
bool scaled_rows(const Fp8GemmArgs& a) {
  return a.a_row_scale != nullptr || a.b_row_scale != nullptr || a.out_type == OutType::kFP16;
}

// Every rule of the arguments, the GPU and the pointer kinds (common/arg_check.h).
Status validate(const Fp8GemmArgs& a, const char* who, const DeviceInfo** dev) {
  using check::extent;
  using check::Null;
  check::ArgCheck c(who);
  gemm::gemm_shape(c, a.m, a.n, a.k, 16)
      .ptr("A", a.a, 16, Null::kRefused, extent(a.m, a.k))
      .ptr("B", a.b, 16, Null::kRefused, extent(a.n, a.k))
      .out("D", a.d, 16, extent(a.m, a.n, out_bytes(a.out_type)))
      .ptr("a_scale", a.a_scale, 4, Null::kAllowed, 4)
      .ptr("b_scale", a.b_scale, 4, Null::kAllowed, 4)
      .ptr("a_row_scale", a.a_row_scale, 4, Null::kAllowed, extent(a.m, 4))
      .ptr("b_row_scale", a.b_row_scale, 4, Null::kAllowed, extent(a.n, 4))
      .ptr("bias", a.bias, 16, Null::kAllowed, extent(a.n, 2))
      .ptr("row_bcast", a.row_bcast, 16, Null::kAllowed, extent(a.row_bcast_rows, a.n, 2))
      // In place (residual == D) is safe: each tile reads its residual before it stores itself.
      .ptr("residual", a.residual, 16, Null::kAllowed, extent(a.m, a.n, 2),
           a.out_type == OutType::kBF16 ? check::Access::kReadAliasOk : check::Access::kRead)
      .finite("alpha", a.alpha);
  if (a.row_bcast) c.dim("row_bcast_rows", a.row_bcast_rows, 1, INT_MAX);
  c.rule(!a.row_bcast && a.row_bcast_rows != 0, [] { return std::string("row_bcast_rows given without a row_bcast tensor"); })
      .rule(a.activation != Activation::kNone && a.activation != Activation::kGelu && a.activation != Activation::kSilu,
            [] { return std::string("unknown activation"); })
      // Any other value picked the BF16 kernel and wrote half-width values into the caller's buffer.
      .rule(a.out_type != OutType::kBF16 && a.out_type != OutType::kFP32 && a.out_type != OutType::kFP16,
            [] { return std::string("unknown out_type"); })
      // The fused epilogue's shared memory holds no per-channel scales (gemm/core/traits.cuh).
      .rule(scaled_rows(a) && (a.row_bcast || a.activation != Activation::kNone),
            [] {
              return std::string("per-row scales and FP16 output run with alpha, the per-tensor scales, a bias and "
                                 "a residual; not with row_bcast or an activation");
            })
      .rule(a.workspace_bytes > 0 && !a.workspace,
            [] { return std::string("workspace_bytes > 0 with a null workspace"); })
      .out("workspace", a.workspace, 16, check::extent_of(a.workspace_bytes), Null::kAllowed);
  return c.device(dev);
}

// Row broadcast and activation need the fused epilogue; a bias, per-row scales and FP16 output
// the staged one (kBias); alpha and the per-tensor scales neither. A residual runs in the fused
// epilogue, or in the staged one beside per-row scales or FP16 output (which the fused one
// cannot hold).
bool fused_epilogue(const Fp8GemmArgs& a) {
  return a.row_bcast != nullptr || a.activation != Activation::kNone || (a.residual != nullptr && !scaled_rows(a));
}
bool staged_epilogue(const Fp8GemmArgs& a) {
  return !fused_epilogue(a) && (a.bias || a.residual || scaled_rows(a));
}
Fp8EpilogueKind epilogue_kind(const Fp8GemmArgs& a) {
  return fused_epilogue(a) ? Fp8EpilogueKind::kFused : staged_epilogue(a) ? Fp8EpilogueKind::kBias : Fp8EpilogueKind::kPlain;
}

Status validate_config(const Fp8GemmArgs& a, const Fp8GemmConfig& c) {
  int stages = 0;
  if (!fp8::fp8_variant_exists(c.block_m, c.block_n, &stages))
    return Status::Invalid("fp8_gemm: no compiled variant with block_m=" + std::to_string(c.block_m) +
                           ", block_n=" + std::to_string(c.block_n));
  if (c.stages != stages)
    return Status::Invalid("fp8_gemm: block_m=" + std::to_string(c.block_m) + ", block_n=" +
                           std::to_string(c.block_n) + " runs with stages=" + std::to_string(stages));
  if (c.promote_every != 1 && c.promote_every != 2)
    return Status::Invalid("fp8_gemm: promote must be 1 or 2 (K blocks per FP32 promotion)");
  const int kb = gemm::promotion_groups(a.k, c.promote_every);
  if (c.splits < 1 || c.splits > kb)
    return Status::Invalid("fp8_gemm: splits must be in [1, " + std::to_string(kb) +
                           "] (K blocks of 128, rounded up, per promotion group)");
  if (c.raster_group < 0 || c.raster_group > gemm::kMaxRasterGroup)
    return Status::Invalid("fp8_gemm: raster_group must be in [0, " + std::to_string(gemm::kMaxRasterGroup) +
                           "] (0 = auto)");
  if (c.grid < 0) return Status::Invalid("fp8_gemm: grid must be >= 0");
  LOWBIT_RETURN_IF_ERROR(
      gemm::check_split_tiles("fp8_gemm", gemm::tile_count(a.m, a.n, c.block_m, c.block_n), c.splits));
  if (c.cluster != 1 && c.cluster != 2) return Status::Invalid("fp8_gemm: cluster must be 1 or 2");
  const bool plain = !staged_epilogue(a) && !fused_epilogue(a);
  if (c.overlap && c.splits != 1)
    return Status::Invalid("fp8_gemm: overlap=1 runs unsplit (no split-K fix-up while MMAs are in flight); config " +
                           c.to_string());
  if (c.cluster == 2 && (!plain || a.m <= 64 || c.splits != 1))
    return Status::Invalid("fp8_gemm: cluster=2 is compiled for M > 64, splits=1 and the plain epilogue without "
                           "a bias; config " + c.to_string());
  if (!fp8::fp8_config_compiled(c, epilogue_kind(a), a.out_type == OutType::kFP32, a.out_type == OutType::kFP16))
    return Status::Invalid("fp8_gemm: no kernel for config " + c.to_string() + " with this epilogue and output (" +
                           fp8::compiled_variants_text(c.block_m, c.block_n) + "; gemm/fp8/variants.def)");
  if (c.uneven && gemm::uneven_tiles_n(1, a.n, c.block_m, c.block_n, 1) == 0)
    return Status::Invalid("fp8_gemm: uneven=1 needs N covered exactly by tiles of " +
                           std::to_string(c.block_n - gemm::UnevenColumnLayout::kTrim) + " and " +
                           std::to_string(c.block_n) + " columns (every N >= 3360 is; below, N in [240k, 256k]); N = " +
                           std::to_string(a.n));
  if (c.head_cols < 0) return Status::Invalid("fp8_gemm: head must be >= 0");
  if (c.head_cols > 0) {
    const int64_t tiles_n = (a.n + c.block_n - 1) / c.block_n;
    if (c.splits < 2 || c.head_cols >= tiles_n || c.cluster != 1 || c.overlap || c.uneven || c.resident_rows ||
        c.cluster_reduce == 1 || fused_epilogue(a) || a.residual != nullptr)
      return Status::Invalid("fp8_gemm: head=C runs the first C tile columns unsplit and the rest split: it needs "
                             "splits > 1, 0 < C < the tile columns (" + std::to_string(tiles_n) +
                             "), no cluster, overlap, uneven or resident rows, creduce=0, and the plain or staged "
                             "epilogue without a residual; config " + c.to_string());
  }
  if (c.stream_k < 0 || c.stream_k > 2) return Status::Invalid("fp8_gemm: sk must be 0, 1 or 2");
  if (c.stream_k > 0) {
    if (c.splits != 1 || c.cluster != 1 || c.overlap || c.uneven || c.resident_rows || c.head_cols > 0 ||
        c.cluster_reduce == 1)
      return Status::Invalid("fp8_gemm: sk=1|2 (stream-K) deals out the last tiles' K blocks itself: it needs "
                             "splits=1, no cluster, overlap, uneven, resident rows or head, and creduce=0; config " +
                             c.to_string());
  }
  // Its rows hold up to N / 240 tiles: the unit count must stay in range with those too.
  if (c.uneven)
    LOWBIT_RETURN_IF_ERROR(gemm::check_split_tiles(
        "fp8_gemm", (a.m + c.block_m - 1) / c.block_m * (a.n / (c.block_n - gemm::UnevenColumnLayout::kTrim)), 1));
  return Status::Ok();
}

}  // namespace

namespace fp8 {
gemm::ClusterCapacity fp8_cluster_capacity(int device) {
  return gemm::cluster_capacity(kFp8VariantSpecs, kFp8VariantLaunchers, kNumFp8VariantSpecs, device);
}
}  // namespace fp8

Status workspace_init(void* workspace, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return Status::Ok();
  LOWBIT_RETURN_IF_ERROR(check::ArgCheck("workspace_init").ptr("workspace", workspace, 1).device());
  const cudaError_t e = cudaMemsetAsync(workspace, 0, bytes, stream);
  if (e != cudaSuccess) return gemm::cuda_error("workspace_init: cudaMemsetAsync", e);
  return Status::Ok();
}

Status fp8_gemm(const Fp8GemmArgs& args, cudaStream_t stream, const Fp8GemmConfig* forced) {
  const DeviceInfo* devp = nullptr;
  LOWBIT_RETURN_IF_ERROR(validate(args, "fp8_gemm", &devp));
  const DeviceInfo& dev = *devp;

  Fp8GemmConfig cfg;
  if (forced) {
    cfg = *forced;
    LOWBIT_RETURN_IF_ERROR(validate_config(args, cfg));
    // Split K within a cluster where compiled (cluster_reduce -1), or as forced.
    const bool in_cluster = fp8::fp8_in_cluster(cfg, epilogue_kind(args), args.out_type);
    if (cfg.cluster_reduce == 1 && !in_cluster)
      return Status::Invalid("fp8_gemm: creduce=1 needs splits > 1 on a kernel compiled to reduce that many within a "
                             "cluster for this epilogue and output; config " + cfg.to_string() + " (" +
                             fp8::compiled_variants_text(cfg.block_m, cfg.block_n) + ")");
    cfg.cluster_reduce = in_cluster && cfg.head_cols == 0 ? 1 : 0;  // a head's tail splits through the workspace
    const size_t need = fp8_gemm_workspace_size(args.m, args.n, args.k, cfg);
    if (need > args.workspace_bytes)
      return Status::Error(StatusCode::kWorkspaceTooSmall,
                           "fp8_gemm: config " + cfg.to_string() + " needs " + std::to_string(need) +
                               " bytes of workspace, got " + std::to_string(args.workspace_bytes));
  } else {
    // Best candidate whose workspace the caller can hold (splits = 1 needs none) and that is
    // compiled for this epilogue; memoized per signature (common/choice_cache.h).
    static ChoiceCache<7, Fp8GemmConfig> chosen;
    // A residual in the staged epilogue rules out a head (Fp8GemmConfig::head_cols): keyed apart.
    const ChoiceKey<7> key{{dev.device, args.m, args.n, args.k,
                            static_cast<int64_t>(epilogue_kind(args)) * 2 + (args.residual ? 1 : 0),
                            static_cast<int64_t>(args.out_type), check::extent_of(args.workspace_bytes)}};
    // The pick says which split-K transport it runs (cluster_reduce 0 or 1).
    const Fp8EpilogueKind epilogue = epilogue_kind(args);
    LOWBIT_RETURN_IF_ERROR(chosen.pick(
        key, &cfg,
        [&] { return gemm::score_candidates(args.m, args.n, args.k, dev.sm_count, fp8::fp8_score_options()); },
        [&](Fp8GemmConfig* c) {
          if (!fp8::fp8_usable_config(c, epilogue, args.out_type == OutType::kFP32, args.out_type == OutType::kFP16))
            return false;
          if (c->head_cols > 0 && args.residual) return false;
          c->cluster_reduce = fp8::fp8_cluster_by_default(*c, args.m, args.n, epilogue, args.out_type,
                                                          fp8::fp8_cluster_capacity(dev.device))
                                  ? 1
                                  : 0;
          return fp8_gemm_workspace_size(args.m, args.n, args.k, *c) <= args.workspace_bytes;
        },
        "fp8_gemm: no usable config for this shape"));
  }

  const bool fused = fused_epilogue(args);
  const int64_t period = args.row_bcast ? args.row_bcast_rows : 0;
  if (!forced && fused && fp8::fp8_resident_by_default(args.m, args.n, period, dev.sm_count))
    fp8::fp8_make_resident(&cfg, args.n, dev.sm_count);
  if (cfg.resident_rows) {
    if (!fused || !fp8::fp8_resident_applies(args.n, period, dev.sm_count))
      return Status::Invalid("fp8_gemm: resident=1 needs a row broadcast with at most " +
                             std::to_string(fp8::kFp8ResidentMaxRows) + " rows and N at most " +
                             std::to_string(fp8::kFp8ResidentBlockN) + " x the SM count");
    const int tn = fp8::fp8_resident_tiles_n(args.n);
    if (cfg.raster_group == 0) cfg.raster_group = 1;
    if (cfg.grid == 0) cfg.grid = dev.sm_count / tn * tn;
    if (cfg.block_m != 128 || cfg.block_n != fp8::kFp8ResidentBlockN || cfg.splits != 1 || cfg.cluster != 1 ||
        cfg.promote_every != 1 || cfg.raster_group != 1 || cfg.grid <= 0 || cfg.grid % tn != 0 ||
        cfg.grid > dev.sm_count)
      return Status::Invalid("fp8_gemm: resident=1 runs bn=128, splits=1, promote=1, group=1 and a grid that is a "
                             "multiple of the N tiles (" + std::to_string(tn) + "), at most the SM count; config " +
                             cfg.to_string());
  }
  // The overlapped resident kernel applies the bias and row broadcast only, and the overlapped
  // staged kernels no residual (W1 v20): a config written with overlap=1 is refused for more, the
  // chooser's pick runs without the overlap (and so with even columns).
  if (cfg.overlap && fused && (args.activation != Activation::kNone || args.residual != nullptr)) {
    if (forced)
      return Status::Invalid("fp8_gemm: overlap=1 with a fused epilogue applies the bias and row broadcast only "
                             "(no activation or residual); config " + cfg.to_string());
    cfg.overlap = false;
  }
  if (cfg.overlap && staged_epilogue(args) && args.residual != nullptr) {
    if (forced)
      return Status::Invalid("fp8_gemm: overlap=1 with per-row scales or FP16 output adds no residual; config " +
                             cfg.to_string());
    cfg.overlap = false;
    cfg.uneven = false;  // compiled with the overlap only
  }
  const int line = fp8::find_fp8_variant(cfg.block_m, cfg.block_n, args.out_type,
                                         fused                    ? fp8::VariantEpilogue::kFused
                                         : staged_epilogue(args) ? fp8::VariantEpilogue::kStaged
                                                                 : fp8::VariantEpilogue::kPlain,
                                         cfg.cluster, cfg.promote_every, cfg.resident_rows, cfg.overlap, cfg.uneven,
                                         cfg.cluster_reduce == 1 && cfg.splits > 1 ? cfg.splits : 0, cfg.stream_k > 0);
  if (line < 0) return Status::Invalid("fp8_gemm: no kernel for config " + cfg.to_string());
  const fp8::VariantLauncher& entry = fp8::kFp8VariantLaunchers[line]();
  if (static_cast<size_t>(entry.smem_bytes) > dev.smem_per_block_optin)
    return Status::Error(StatusCode::kUnsupportedDevice,
                         "fp8_gemm: kernel needs " + std::to_string(entry.smem_bytes) +
                             " bytes of shared memory per block; the device allows " +
                             std::to_string(dev.smem_per_block_optin));

  // One launch of `cfg` over `args` (a column range of the call's output, d_ld columns apart).
  auto run_part = [&](const Fp8GemmArgs& args, int64_t d_ld, const Fp8GemmConfig& cfg) -> Status {
    CUtensorMap tm_a, tm_b, tm_d;
    hopper::TensorMap2dSpec sa;
    sa.base = args.a;
    sa.dtype = CU_TENSOR_MAP_DATA_TYPE_UINT8;
    sa.elem_bytes = 1;
    sa.rows = static_cast<uint64_t>(args.m);
    sa.cols = static_cast<uint64_t>(args.k);
    sa.row_stride_bytes = static_cast<uint64_t>(args.k);
    const int a_box_rows = gemm::a_box_rows(args.m, cfg.block_m);
    sa.box_rows = static_cast<uint32_t>(a_box_rows);
    sa.box_cols = 128;
    LOWBIT_RETURN_IF_ERROR(hopper::make_tensor_map_2d(sa, &tm_a));
    hopper::TensorMap2dSpec sb = sa;
    sb.base = args.b;
    sb.rows = static_cast<uint64_t>(args.n);
    sb.box_rows = static_cast<uint32_t>(cfg.block_n / cfg.cluster);  // each CTA of a pair loads half of B
    LOWBIT_RETURN_IF_ERROR(hopper::make_tensor_map_2d(sb, &tm_b));
    // The epilogue's staged chunk: 64 rows x 128 bytes, or 64 / 32 for tile widths whose rows are
    // not a multiple of 128 bytes, swizzled to its width.
    const int ob = out_bytes(args.out_type);
    const int chunk_bytes = gemm::epi_chunk_bytes(cfg.block_n, ob);
    const CUtensorMapDataType d_type = args.out_type == OutType::kFP32   ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
                                       : args.out_type == OutType::kFP16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                                         : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    hopper::TensorMap2dSpec sd =
        hopper::dense_2d(args.d, d_type, ob, args.m, args.n, 64, static_cast<uint32_t>(chunk_bytes / ob));
    sd.row_stride_bytes = static_cast<uint64_t>(d_ld) * ob;
    sd.swizzle = chunk_bytes == 128 ? hopper::TmaSwizzle::k128B
                 : chunk_bytes == 64 ? hopper::TmaSwizzle::k64B
                                     : hopper::TmaSwizzle::k32B;
    sd.l2_promotion = CU_TENSOR_MAP_L2_PROMOTION_NONE;
    LOWBIT_RETURN_IF_ERROR(hopper::make_tensor_map_2d(sd, &tm_d));
    // The fused epilogue's row-broadcast boxes: 8 rows x 64 BF16 columns in the 128-byte swizzle
    // (gemm/fp8/epilogue_fused.cuh); with uneven columns, B's map for the trimmed tiles (a box
    // kTrim rows shorter). Unused (tm_d stands in) otherwise.
    CUtensorMap tm_bcast = tm_d;
    if (cfg.uneven) {
      hopper::TensorMap2dSpec st = sb;
      st.box_rows = static_cast<uint32_t>(cfg.block_n - gemm::UnevenColumnLayout::kTrim);
      LOWBIT_RETURN_IF_ERROR(hopper::make_tensor_map_2d(st, &tm_bcast));
    }
    if (args.row_bcast)
      LOWBIT_RETURN_IF_ERROR(hopper::make_tensor_map_2d(
          hopper::dense_2d(args.row_bcast, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, args.row_bcast_rows, args.n, 8, 64),
          &tm_bcast));
    // The last tile row's A box, which stops at M (gemm::a_tail; A's own map where there is none or
    // the kernel takes none: uneven columns).
    const gemm::ATail a_tail = cfg.uneven ? gemm::ATail{} : gemm::a_tail(args.m, cfg.block_m);
    CUtensorMap tm_a_tail = tm_a;
    if (a_tail.rows > 0) {
      hopper::TensorMap2dSpec st = sa;
      st.box_rows = static_cast<uint32_t>(a_tail.rows);
      LOWBIT_RETURN_IF_ERROR(hopper::make_tensor_map_2d(st, &tm_a_tail));
    }

    gemm::KernelParams p{};
    // With clusters, the schedule's rows are cluster rows (cfg.cluster tiles each).
    // With promotion every two K blocks the schedule's K blocks are pairs (an odd last one pairs
    // with a block past K, which TMA fills with zeros).
    // Uneven columns: as many tiles a row as fill the waves of the grid best (one CTA per SM at
    // most for these kernels).
    const int uneven_grid = cfg.uneven ? (cfg.grid > 0 ? cfg.grid : dev.sm_count) : 0;
    p.sched = gemm::tile_schedule(args.m, args.n, gemm::promotion_groups(args.k, cfg.promote_every), cfg.block_m,
                                  cfg.block_n, cfg.cluster, cfg.splits, cfg.raster_group, dev.sm_count, uneven_grid);
    p.walk = gemm::TileWalk::of(p.sched);
    if (cfg.uneven)
      p.uneven = gemm::uneven_layout(args.n, cfg.block_n, p.sched);
    p.set_problem(args.m, args.n, args.k, a_box_rows, args.alpha, args.a_scale, args.b_scale);
    p.set_a_tail(a_tail);
    p.epi.row_scale = args.a_row_scale;
    p.epi.col_scale = args.b_row_scale;
    p.epi.bias = static_cast<const __nv_bfloat16*>(args.bias);
    p.epi.row_bcast = static_cast<const __nv_bfloat16*>(args.row_bcast);
    p.epi.row_period = static_cast<int>(args.row_bcast ? args.row_bcast_rows : 1);
    p.epi.residual = static_cast<const __nv_bfloat16*>(args.residual);
    p.epi.activation = static_cast<int>(args.activation == Activation::kGelu   ? gemm::EpilogueActivation::kGelu
                                        : args.activation == Activation::kSilu ? gemm::EpilogueActivation::kSilu
                                                                               : gemm::EpilogueActivation::kNone);
    if (cfg.cluster_reduce != 1 || cfg.splits == 1) gemm::bind_split_k_workspace(p, args.workspace);
    int units = p.sched.num_units();
    int grid = cfg.grid;
    if (cfg.stream_k > 0) {
      // The walk is laid out for exactly `grid` CTAs: single CTAs launch as many as asked
      // (hopper::persistent_grid oversubscribes), whatever is resident, and no CTA waits on another.
      grid = cfg.grid > 0 ? cfg.grid : dev.sm_count;
      p.sk = gemm::StreamKWalk::of(p.sched, grid, cfg.stream_k);
      // The tail's K blocks are counted in an int, its tiles in the split-K counters.
      LOWBIT_RETURN_IF_ERROR(gemm::check_split_tiles("fp8_gemm", p.sk.tail_tiles(), 2));
      if (static_cast<int64_t>(p.sk.tail_stacks) * p.sk.k_blocks >= INT_MAX)
        return Status::Invalid("fp8_gemm: sk=" + std::to_string(cfg.stream_k) + " deals out " +
                               std::to_string(p.sk.tail_tiles()) + " tiles of " + std::to_string(p.sk.k_blocks) +
                               " K blocks: at most 2^31 - 1 K blocks in all; use sk=0");
      gemm::bind_split_k_workspace(p, args.workspace, /*split=*/p.sk.tail_stacks > 0);
      units = std::max(units, grid);
    }
    int launched = 0;
    const cudaError_t e =
        entry.launch(grid, units, stream, tm_a, tm_b, tm_d, tm_bcast, tm_a_tail, p, dev.device, &launched);
    auto describe = [&] {
      return "fp8_gemm " + std::to_string(args.m) + "x" + std::to_string(args.n) + "x" + std::to_string(args.k) + " " +
             cfg.to_string();
    };
    return gemm::launch_status(e, describe, launched, units);
  };
  if (cfg.head_cols == 0) return run_part(args, args.n, cfg);
  // Split only the last wave (Fp8GemmConfig::head_cols): the head's tile columns unsplit, then the
  // rest split, on the same stream; both write their own columns of D.
  const int64_t col0 = static_cast<int64_t>(cfg.head_cols) * cfg.block_n;
  Fp8GemmArgs head = args;
  head.n = col0;
  Fp8GemmConfig head_cfg = cfg;
  head_cfg.splits = 1;
  LOWBIT_RETURN_IF_ERROR(run_part(head, args.n, head_cfg));
  Fp8GemmArgs tail = args;
  tail.n = args.n - col0;
  tail.b = static_cast<const uint8_t*>(args.b) + col0 * args.k;
  tail.d = static_cast<uint8_t*>(args.d) + col0 * out_bytes(args.out_type);
  if (args.bias) tail.bias = static_cast<const uint8_t*>(args.bias) + col0 * 2;
  if (args.b_row_scale) tail.b_row_scale = args.b_row_scale + col0;
  return run_part(tail, args.n, cfg);
}

}  // namespace lowbit
