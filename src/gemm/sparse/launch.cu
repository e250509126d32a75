// Host side of the 2:4-sparse GEMM: argument checks, config choice, tensor maps, launch of the
// FP8 GEMM kernel with the sparse operand path. Stream-ordered; no allocation, no synchronization.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

#include "common/choice_cache.h"
#include "common/device_cache.h"
#include "common/key_value.h"
#include "formats/sparse24_layout.h"
#include "gemm/core/chooser.h"
#include "gemm/core/kernel.cuh"
#include "gemm/launch_common.h"
#include "gemm/sparse/traits.cuh"
#include "hopper/cluster_launch.h"
#include "hopper/tensor_map.h"
#include "lowbit/device.h"
#include "lowbit/sparse.h"

namespace lowbit {
namespace {

using formats::Sparse24Type;

Sparse24Type to_format(SparseType t) { return t == SparseType::kE4M3 ? Sparse24Type::kE4M3 : Sparse24Type::kF16; }

// The compiled tile widths, as data, with the share of the sparse tensor rate each sustained at
// 4096 x 8192 x 8192 on an H100 (docs/perf.md W3 v3): promoted (E4M3) and unpromoted (F16, and
// E4M3 with fast accumulation) mainloops.
struct SparseVariant {
  int block_n;
  double efficiency_promoted;
  double efficiency_direct;
  const char* note;
};
constexpr SparseVariant kSparseVariants[] = {
    {64, 0.25, 0.28, "narrow: 10 stages; twice the tiles of 128 for few tokens (efficiencies assumed, W3 v5)"},
    {128, 0.30, 0.34, "balanced: 7 stages, double-buffered promotion"},
    {256, 0.38, 0.50, "widest: least B traffic per FLOP, 4 stages, two-part promotion"},
};

bool variant_exists(int block_n) {
  for (const auto& v : kSparseVariants)
    if (v.block_n == block_n) return true;
  return false;
}

using LaunchFn = cudaError_t (*)(int grid, int max_units, cudaStream_t, const CUtensorMap&, const CUtensorMap&,
                                 const CUtensorMap&, const gemm::KernelParams&, int device, int* launched);

template <Sparse24Type kType, int kBlockN, int kCluster, bool kPromote, bool kOutFp16>
cudaError_t launch_variant(int grid, int max_units, cudaStream_t stream, const CUtensorMap& a, const CUtensorMap& b,
                           const CUtensorMap& d, const gemm::KernelParams& p, int device, int* launched) {
  using T = sparse::SparseTraits<kType, kBlockN, kCluster, kPromote, kOutFp16>;
  return hopper::launch_persistent<gemm::gemm_kernel<T>>(grid, max_units, T::kThreads, T::kSmemBytes, kCluster, device,
                                                         stream, launched, a, b, d, d, a,
                                                         p);  // no row broadcast, no A tail
}

struct Entry {
  Sparse24Type type;
  int block_n;
  int cluster;
  bool promote;
  bool out_fp16;
  LaunchFn launch;
  int smem_bytes;
};
template <Sparse24Type kType, int kBlockN, int kCluster, bool kPromote = kType == Sparse24Type::kE4M3,
          bool kOutFp16 = false>
constexpr Entry entry() {
  using T = sparse::SparseTraits<kType, kBlockN, kCluster, kPromote, kOutFp16>;
  static_assert(T::Operands::kBlocksPerPromotion == (kPromote ? 2 : 1), "sparse24_gemm counts K groups this way");
  return {kType,    kBlockN, kCluster, kPromote, kOutFp16, &launch_variant<kType, kBlockN, kCluster, kPromote, kOutFp16>,
          T::kSmemBytes};
}
// Every variant x {E4M3 promoted, E4M3 fast-accumulating, F16 to BF16, F16 to FP16}, and CTA
// pairs of the widest tile (the promoted 128-wide tile spills with the pair's bookkeeping; the
// unpromoted 128-wide pairs compiled and measured 5-20% slower than single CTAs, docs/perf.md W3 v3).
const Entry kEntries[] = {
    entry<Sparse24Type::kE4M3, 64, 1>(),
    entry<Sparse24Type::kE4M3, 64, 1, false>(),
    entry<Sparse24Type::kF16, 64, 1>(),
    entry<Sparse24Type::kF16, 64, 1, false, true>(),
    entry<Sparse24Type::kE4M3, 128, 1>(),
    entry<Sparse24Type::kE4M3, 256, 1>(),
    entry<Sparse24Type::kE4M3, 128, 1, false>(),
    entry<Sparse24Type::kE4M3, 256, 1, false>(),
    entry<Sparse24Type::kF16, 128, 1>(),
    entry<Sparse24Type::kF16, 256, 1>(),
    entry<Sparse24Type::kF16, 128, 1, false, true>(),
    entry<Sparse24Type::kF16, 256, 1, false, true>(),
    entry<Sparse24Type::kE4M3, 256, 2>(),
    entry<Sparse24Type::kE4M3, 256, 2, false>(),
    entry<Sparse24Type::kF16, 256, 2>(),
    entry<Sparse24Type::kF16, 256, 2, false, true>(),
};
static_assert(sizeof(kEntries) / sizeof(kEntries[0]) == 4 * sizeof(kSparseVariants) / sizeof(kSparseVariants[0]) + 4,
              "every variant is compiled for each mainloop and output");

// E4M3 promotes unless the caller asked for fast accumulation; F16 never promotes.
bool promotes(Sparse24Type type, bool fast_accum) { return type == Sparse24Type::kE4M3 && !fast_accum; }

// The schedule's K blocks are groups of stages: pairs where the mainloop promotes every two (the
// metadata is padded to an even count of K blocks for them), single K blocks where it does not.
int group_k(Sparse24Type type, bool promote) { return formats::sparse24_block_k(type) * (promote ? 2 : 1); }
int k_groups(int64_t k, Sparse24Type type, bool promote) {
  return static_cast<int>((k + group_k(type, promote) - 1) / group_k(type, promote));
}

const Entry* find_entry(Sparse24Type type, int block_n, int cluster, bool promote, bool out_fp16) {
  for (const auto& e : kEntries)
    if (e.type == type && e.block_n == block_n && e.cluster == cluster && e.promote == promote &&
        e.out_fp16 == out_fp16)
      return &e;
  return nullptr;
}

// Saturated at INT64_MAX (the size query calls it with any shape).
int64_t tiles_for(int64_t m, int64_t n, int block_n) {
  int64_t tiles = 0;
  return check::mul(m / 128 + (m % 128 != 0), n / block_n + (n % block_n != 0), &tiles) ? tiles : INT64_MAX;
}

// Cost model (same form as the core chooser, gemm/core/chooser.cpp): waves of units at the sparse
// tensor rate (twice the dense one) against the bytes streamed (half of A, its metadata, B, D).
struct Scored {
  Sparse24GemmConfig config;
  double t_us;
};
std::vector<Scored> score(int64_t m, int64_t n, int64_t k, Sparse24Type type, bool promote, int sm_count) {
  constexpr double kDenseTflopsPerSm = 1979.0 / 132.0;  // E4M3; F16 is half
  constexpr double kDramTBs = 3.0;
  constexpr double kUnitOverheadUs = 1.5;
  // A split tile's fix-up (partials through L2, the last split waits on the others): measured at
  // 7168 x 128 x 2048, two splits ran 1.7-2.4 us slower than none where this model without the
  // term expected them 3.5 us faster (docs/perf.md W3 v3).
  constexpr double kSplitFixupUs = 4.0;
  const int eb = formats::sparse24_elem_bytes(type);
  const int kb = k_groups(k, type, promote);
  std::vector<Scored> out;
  for (const auto& v : kSparseVariants) {
    const double rate =
        2.0 * kDenseTflopsPerSm / eb * (promote ? v.efficiency_promoted : v.efficiency_direct);
    const int tiles = static_cast<int>(tiles_for(m, n, v.block_n));  // the shape was validated below 2^31
    for (int splits = 1; splits <= std::min(kb, 16); ++splits) {
      const int units = tiles * splits;
      if (splits > 1 && units > 2 * sm_count) break;
      const double rounds = std::ceil(static_cast<double>(units) / sm_count);
      const int unit_kb = (kb + splits - 1) / splits;
      const double unit_us = 2.0 * 128 * v.block_n * group_k(type, promote) * unit_kb / (rate * 1e6);
      const double t_compute = rounds * (unit_us + kUnitOverheadUs);
      const double active = std::min(1.0, static_cast<double>(units) / sm_count);
      const double bytes = static_cast<double>(m) * k * eb / 2 + static_cast<double>(m) * k / 8 +
                           static_cast<double>(n) * k * eb + static_cast<double>(m) * n * 2 +
                           (splits > 1 ? 2.0 * tiles * splits * 128.0 * v.block_n * 4.0 : 0.0);
      const double t_memory = bytes / (kDramTBs * 1e6 * std::min(1.0, active / 0.7));
      Scored s;
      s.config.block_n = v.block_n;
      s.config.splits = splits;
      s.t_us = std::max(t_compute, t_memory) + (splits > 1 ? kSplitFixupUs : 0.0);
      char reason[200];
      std::snprintf(reason, sizeof(reason), "model: %d units on %d SMs, %s-bound, est %.1f us (%s)", units, sm_count,
                    t_compute >= t_memory ? "tensor" : "memory", s.t_us, v.note);
      s.config.reason = reason;
      // The dense chooser's balanced grid (gemm::balanced_grid; 1.009 at 4096 x 8192 x 8192 and
      // 8192^3 here, docs/perf.md W1 v12): its threshold counts K blocks of 128.
      const int g = v.block_n == 256 ? gemm::balanced_grid(units, sm_count, unit_kb * group_k(type, promote) / 128) : 0;
      if (g > 0) {
        s.config.grid = g;
        s.config.reason += "; grid=" + std::to_string(g) + " (the same number of units on every CTA)";
      }
      out.push_back(s);
    }
  }
  // Ties (within 3%) go to fewer splits, then to the narrower tile (the measured default).
  std::stable_sort(out.begin(), out.end(), [](const Scored& a, const Scored& b) {
    if (std::fabs(a.t_us - b.t_us) > 0.03 * std::min(a.t_us, b.t_us)) return a.t_us < b.t_us;
    if (a.config.splits != b.config.splits) return a.config.splits < b.config.splits;
    return a.config.block_n < b.config.block_n;
  });
  return out;
}

// Every rule of the arguments, the GPU and the pointer kinds (common/arg_check.h).
Status validate(const Sparse24GemmArgs& a, const DeviceInfo** dev) {
  using check::extent;
  using check::Null;
  const int64_t eb = a.type == SparseType::kF16 ? 2 : 1;
  check::ArgCheck c("sparse24_gemm");
  gemm::gemm_shape(c, a.m, a.n, a.k, 32)
      .rule(a.type != SparseType::kE4M3 && a.type != SparseType::kF16,
            [] { return std::string("unknown element type"); })
      .rule(a.out != SparseOut::kBF16 && a.out != SparseOut::kFP16, [] { return std::string("unknown output type"); })
      .rule(a.out == SparseOut::kFP16 && a.type != SparseType::kF16,
            [] { return std::string("FP16 output is compiled for F16 inputs only (E4M3 writes BF16)"); })
      .ptr("A values", a.a_values, 16, Null::kRefused, extent(a.m, a.k / 2, eb))
      .ptr("A metadata", a.a_meta, 16, Null::kRefused, check::extent_of(sparse24_meta_bytes(a.m, a.k, a.type)))
      .ptr("B", a.b, 16, Null::kRefused, extent(a.n, a.k, eb))
      .out("D", a.d, 16, extent(a.m, a.n, 2))
      .ptr("a_scale", a.a_scale, 4, Null::kAllowed, 4)
      .ptr("b_scale", a.b_scale, 4, Null::kAllowed, 4)
      .finite("alpha", a.alpha)
      .rule(a.workspace_bytes > 0 && !a.workspace,
            [] { return std::string("workspace_bytes > 0 with a null workspace"); })
      .out("workspace", a.workspace, 16, check::extent_of(a.workspace_bytes), Null::kAllowed);
  return c.device(dev);
}

}  // namespace

size_t sparse24_meta_bytes(int64_t m, int64_t k, SparseType type) {
  if (m <= 0 || k <= 0 || (type != SparseType::kE4M3 && type != SparseType::kF16)) return 0;
  // formats::sparse24_meta_bytes in saturating arithmetic: a size query never wraps.
  const int64_t slab_rows = formats::kSparseTileRows, pair_k = 2 * formats::sparse24_block_k(to_format(type));
  const size_t slabs = check::sat_mul(check::sat_size(m / slab_rows + (m % slab_rows != 0)),
                                      static_cast<size_t>(formats::kSparseTileRows / formats::kSparseSlabRows));
  const size_t kblocks = check::sat_mul(check::sat_size(k / pair_k + (k % pair_k != 0)), 2);
  return check::sat_mul(check::sat_mul(slabs, kblocks), formats::kSparseMetaBlockBytes);
}

std::string Sparse24GemmConfig::to_string() const {
  std::ostringstream os;
  os << "bn=" << block_n << ",splits=" << splits << ",group=" << raster_group << ",grid=" << grid;
  if (cluster != 1) os << ",cluster=" << cluster;
  return os.str();
}

Status parse_sparse24_config(const std::string& text, Sparse24GemmConfig* out) {
  if (!out) return Status::Invalid("parse_sparse24_config: out must be non-null");
  Sparse24GemmConfig c;
  LOWBIT_RETURN_IF_ERROR(parse_int_items(text, [&c](const std::string& key, int value) {
    if (key == "bn") c.block_n = value;
    else if (key == "splits") c.splits = value;
    else if (key == "group") c.raster_group = value;
    else if (key == "grid") c.grid = value;
    else if (key == "cluster") c.cluster = value;
    else return Status::Invalid("unknown sparse config key '" + key + "' (bn, splits, group, grid, cluster)");
    return Status::Ok();
  }));
  if (!variant_exists(c.block_n))
    return Status::Invalid("no compiled sparse variant with bn=" + std::to_string(c.block_n) + " (64, 128, 256)");
  if (c.cluster != 1 && c.cluster != 2) return Status::Invalid("sparse cluster must be 1 or 2");
  c.reason = "forced";
  *out = c;
  return Status::Ok();
}

size_t sparse24_gemm_workspace_size(int64_t m, int64_t n, int64_t /*k*/, SparseType /*type*/,
                                    const Sparse24GemmConfig& config) {
  // A config no launch would take needs nothing (a zero block_n once divided by zero here).
  // Past size_t, SIZE_MAX (gemm::split_k_workspace_bytes).
  if (m <= 0 || n <= 0 || !variant_exists(config.block_n) || config.splits < 1) return 0;
  return gemm::split_k_workspace_bytes(static_cast<size_t>(tiles_for(m, n, config.block_n)), config.splits, 128,
                                       config.block_n);
}

Status choose_sparse24_config(int64_t m, int64_t n, int64_t k, SparseType type, Sparse24GemmConfig* out,
                              bool fast_accum) {
  check::ArgCheck c("choose_sparse24_config");
  c.rule(!out, [] { return std::string("out must be non-null"); });
  gemm::gemm_shape(c, m, n, k, 32).rule(type != SparseType::kE4M3 && type != SparseType::kF16,
                                        [] { return std::string("unknown sparse type"); });
  LOWBIT_RETURN_IF_ERROR(c.status());
  const DeviceInfo* devp = nullptr;
  LOWBIT_RETURN_IF_ERROR(current_device(&devp));
  const DeviceInfo& dev = *devp;
  const Sparse24Type t = to_format(type);
  const auto cands = score(m, n, k, t, promotes(t, fast_accum), dev.sm_count);
  if (cands.empty()) return Status::Invalid("sparse24_gemm: no candidate for this shape");
  *out = cands.front().config;
  return Status::Ok();
}

Status sparse24_gemm(const Sparse24GemmArgs& args, cudaStream_t stream, const Sparse24GemmConfig* forced) {
  const DeviceInfo* devp = nullptr;
  LOWBIT_RETURN_IF_ERROR(validate(args, &devp));
  const DeviceInfo& dev = *devp;
  const Sparse24Type type = to_format(args.type);
  const bool promote = promotes(type, args.fast_accum);
  const bool out_fp16 = args.out == SparseOut::kFP16;
  const int kb = k_groups(args.k, type, promote);

  Sparse24GemmConfig cfg;
  if (forced) {
    cfg = *forced;
    if (!variant_exists(cfg.block_n))
      return Status::Invalid("sparse24_gemm: no compiled variant with block_n=" + std::to_string(cfg.block_n));
    if (cfg.splits < 1 || cfg.splits > kb)
      return Status::Invalid("sparse24_gemm: splits must be in [1, " + std::to_string(kb) + "] (groups of K blocks)");
    LOWBIT_RETURN_IF_ERROR(gemm::check_split_tiles("sparse24_gemm", tiles_for(args.m, args.n, cfg.block_n), cfg.splits));
    if (cfg.raster_group < 0 || cfg.raster_group > gemm::kMaxRasterGroup || cfg.grid < 0)
      return Status::Invalid("sparse24_gemm: raster_group must be in [0, " + std::to_string(gemm::kMaxRasterGroup) +
                             "] and grid >= 0 (0 = auto)");
    if (cfg.cluster != 1 && cfg.cluster != 2) return Status::Invalid("sparse24_gemm: cluster must be 1 or 2");
    if (cfg.cluster == 2 && (args.m <= 64 || cfg.splits != 1 || !find_entry(type, cfg.block_n, 2, promote, out_fp16)))
      return Status::Invalid("sparse24_gemm: cluster=2 needs a compiled pair kernel, M > 64 and splits=1; config " +
                             cfg.to_string());
    const size_t need = sparse24_gemm_workspace_size(args.m, args.n, args.k, args.type, cfg);
    if (need > args.workspace_bytes)
      return Status::Error(StatusCode::kWorkspaceTooSmall, "sparse24_gemm: config " + cfg.to_string() + " needs " +
                                                               std::to_string(need) + " bytes of workspace, got " +
                                                               std::to_string(args.workspace_bytes));
  } else {
    // Memoized per signature (common/choice_cache.h).
    static ChoiceCache<7, Sparse24GemmConfig> chosen;
    const ChoiceKey<7> key{{dev.device, args.m, args.n, args.k, static_cast<int64_t>(type), promote ? 1 : 0,
                            check::extent_of(args.workspace_bytes)}};
    LOWBIT_RETURN_IF_ERROR(chosen.pick(
        key, &cfg, [&] { return score(args.m, args.n, args.k, type, promote, dev.sm_count); },
        [&](Sparse24GemmConfig* c) {
          return sparse24_gemm_workspace_size(args.m, args.n, args.k, args.type, *c) <= args.workspace_bytes;
        },
        "sparse24_gemm: no usable config for this shape"));
  }
  const Entry* entry = find_entry(type, cfg.block_n, cfg.cluster, promote, out_fp16);
  if (!entry)
    return Status::Invalid("sparse24_gemm: no kernel for config " + cfg.to_string() +
                           (args.fast_accum ? " with fast accumulation" : ""));
  if (static_cast<size_t>(entry->smem_bytes) > dev.smem_per_block_optin)
    return Status::Error(StatusCode::kUnsupportedDevice, "sparse24_gemm: kernel needs " +
                                                             std::to_string(entry->smem_bytes) +
                                                             " bytes of shared memory per block; the device allows " +
                                                             std::to_string(dev.smem_per_block_optin));

  const int eb = formats::sparse24_elem_bytes(type);
  const CUtensorMapDataType dtype = eb == 1 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  const int a_box_rows = gemm::a_box_rows(args.m, 128);  // as the dense GEMM: no box past a small M
  CUtensorMap tm_a, tm_b, tm_d;
  hopper::TensorMap2dSpec sa;
  sa.base = args.a_values;
  sa.dtype = dtype;
  sa.elem_bytes = eb;
  sa.rows = static_cast<uint64_t>(args.m);
  sa.cols = static_cast<uint64_t>(args.k / 2);
  sa.row_stride_bytes = static_cast<uint64_t>(args.k / 2) * eb;
  sa.box_rows = static_cast<uint32_t>(a_box_rows);
  sa.box_cols = static_cast<uint32_t>(64 / eb);  // 64 compressed bytes per row per K block
  sa.swizzle = hopper::TmaSwizzle::k64B;
  LOWBIT_RETURN_IF_ERROR(hopper::make_tensor_map_2d(sa, &tm_a));
  hopper::TensorMap2dSpec sb;
  sb.base = args.b;
  sb.dtype = dtype;
  sb.elem_bytes = eb;
  sb.rows = static_cast<uint64_t>(args.n);
  sb.cols = static_cast<uint64_t>(args.k);
  sb.row_stride_bytes = static_cast<uint64_t>(args.k) * eb;
  sb.box_rows = static_cast<uint32_t>(cfg.block_n / cfg.cluster);  // each CTA of a pair loads half of B
  sb.box_cols = static_cast<uint32_t>(128 / eb);
  LOWBIT_RETURN_IF_ERROR(hopper::make_tensor_map_2d(sb, &tm_b));
  hopper::TensorMap2dSpec sd = hopper::dense_2d(
      args.d, out_fp16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, args.m, args.n, 64, 64);
  sd.l2_promotion = CU_TENSOR_MAP_L2_PROMOTION_NONE;
  LOWBIT_RETURN_IF_ERROR(hopper::make_tensor_map_2d(sd, &tm_d));

  gemm::KernelParams p{};
  // With clusters, the schedule's rows are cluster rows (cfg.cluster tiles each).
  p.sched = gemm::tile_schedule(args.m, args.n, kb, 128, cfg.block_n, cfg.cluster, cfg.splits, cfg.raster_group,
                                dev.sm_count);
  p.walk = gemm::TileWalk::of(p.sched);
  p.set_problem(args.m, args.n, args.k, a_box_rows, args.alpha, args.a_scale, args.b_scale);
  p.epi.row_period = 1;
  p.sparse_meta = static_cast<const uint8_t*>(args.a_meta);
  p.sparse_meta_block_stride = formats::sparse24_slabs(args.m) * formats::kSparseMetaBlockBytes;
  gemm::bind_split_k_workspace(p, args.workspace);
  const int units = p.sched.num_units();
  int launched = 0;
  const cudaError_t e = entry->launch(cfg.grid, units, stream, tm_a, tm_b, tm_d, p, dev.device, &launched);
  auto describe = [&] {
    return std::string("sparse24_gemm ") + (eb == 1 ? "e4m3 " : "f16 ") + std::to_string(args.m) + "x" +
           std::to_string(args.n) + "x" + std::to_string(args.k) + " " + cfg.to_string();
  };
  return gemm::launch_status(e, describe, launched, units);
}

}  // namespace lowbit
