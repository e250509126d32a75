// Host side of the block-scaled FP8 GEMM (dense and grouped): argument checks, tensor maps,
// launches. Stream-ordered; no allocation and no synchronization (except in
// fp8_grouped_check_status, which exists to synchronize).
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

#include "common/key_value.h"
#include "common/ok_once.h"
#include "gemm/blockscaled/grouped_prepare.cuh"
#include "gemm/blockscaled/grouped_workspace.h"
#include "gemm/blockscaled/kernel.cuh"
#include "gemm/launch_common.h"
#include "hopper/cluster_launch.h"
#include "hopper/tensor_map.h"
#include "lowbit/blockscaled.h"
#include "common/device_cache.h"
#include "lowbit/device.h"

namespace lowbit {
namespace {

using blockscaled::BlockScaledParams;

template <bool kOutFp32, int kClusterM = 1, int kBlockN = 128>
using Traits = blockscaled::BlockScaledTraits<
    blockscaled::blockscaled_stages(kBlockN, blockscaled::blockscaled_epi_slots(kBlockN)), kOutFp32, kClusterM, kBlockN,
    blockscaled::blockscaled_epi_slots(kBlockN)>;

// Multicast pairs (cluster = 2) cut L2 traffic by a fifth. Since the relay thread took the remote
// arrivals off the consumers' path they run as fast as single CTAs on the grouped sets and 8%
// slower dense (docs/perf.md block-scaled, session 20), so single CTAs stay the default.
constexpr int kDefaultCluster = 1;

// The compiled tiles: (block_n, cluster) = (128, 1), (128, 2), (256, 1) and (256, 2).
struct Variant {
  int block_n, cluster;
};

// One compiled variant: output type x problem layout x tile. The grid is a multiple of the
// cluster size and no larger than the clusters the device can hold at once, so every persistent
// CTA is resident.
template <bool kOutFp32, bool kGrouped, int kClusterM, int kBlockN>
struct Launcher {
  using T = Traits<kOutFp32, kClusterM, kBlockN>;
  static constexpr auto kernel = blockscaled::blockscaled_gemm_kernel<T, kGrouped>;

  // `grid` <= 0: as many CTAs as fit; otherwise rounded down to a multiple of the cluster size.
  static cudaError_t launch(int grid, int max_units, cudaStream_t stream, const CUtensorMap& a, const CUtensorMap& b,
                            const CUtensorMap& d, const BlockScaledParams& p, int device) {
    int max_ctas = 0;
    cudaError_t e = hopper::prepare_persistent<kernel>(T::kThreads, T::kSmemBytes, kClusterM, device, &max_ctas);
    if (e != cudaSuccess) return e;
    const int ctas = hopper::persistent_grid(grid, max_ctas, max_units, kClusterM, /*oversubscribe=*/false);
    static const bool log_launches = std::getenv("LOWBIT_LOG") != nullptr;
    if (log_launches)
      std::fprintf(stderr, "[lowbit] blockscaled %s: bn=%d, %d stages, %d CTAs in clusters of %d (at most %d resident)\n",
                   kGrouped ? "grouped" : "dense", kBlockN, T::kStages, ctas, kClusterM, max_ctas);
    return hopper::launch_clustered(kernel, ctas, T::kThreads, T::kSmemBytes, kClusterM, stream, a, b, d, p);
  }
};

template <bool kGrouped, bool kOutFp32>
cudaError_t launch_variant(Variant v, int grid, int max_units, cudaStream_t s, const CUtensorMap& a,
                           const CUtensorMap& b, const CUtensorMap& d, const BlockScaledParams& p, int device) {
  if (v.block_n == 256)
    return v.cluster == 2 ? Launcher<kOutFp32, kGrouped, 2, 256>::launch(grid, max_units, s, a, b, d, p, device)
                          : Launcher<kOutFp32, kGrouped, 1, 256>::launch(grid, max_units, s, a, b, d, p, device);
  if (v.cluster == 2) return Launcher<kOutFp32, kGrouped, 2, 128>::launch(grid, max_units, s, a, b, d, p, device);
  return Launcher<kOutFp32, kGrouped, 1, 128>::launch(grid, max_units, s, a, b, d, p, device);
}

template <bool kGrouped>
cudaError_t launch_for(OutType out, Variant v, int grid, int max_units, cudaStream_t s, const CUtensorMap& a,
                       const CUtensorMap& b, const CUtensorMap& d, const BlockScaledParams& p, int device) {
  return out == OutType::kFP32 ? launch_variant<kGrouped, true>(v, grid, max_units, s, a, b, d, p, device)
                               : launch_variant<kGrouped, false>(v, grid, max_units, s, a, b, d, p, device);
}

template <bool kOutFp32>
int smem_bytes(Variant v) {
  if (v.block_n == 256) return v.cluster == 2 ? Traits<kOutFp32, 2, 256>::kSmemBytes : Traits<kOutFp32, 1, 256>::kSmemBytes;
  return v.cluster == 2 ? Traits<kOutFp32, 2>::kSmemBytes : Traits<kOutFp32, 1>::kSmemBytes;
}

Status check_smem(const DeviceInfo& dev, OutType out, Variant v) {
  const int need = out == OutType::kFP32 ? smem_bytes<true>(v) : smem_bytes<false>(v);
  if (static_cast<size_t>(need) > dev.smem_per_block_optin)
    return Status::Error(StatusCode::kUnsupportedDevice,
                         "block-scaled GEMM needs " + std::to_string(need) +
                             " bytes of shared memory per block; the device allows " +
                             std::to_string(dev.smem_per_block_optin));
  return Status::Ok();
}

Status check_config(const char* who, const BlockScaledConfig& c) {
  if (c.grid < 0) return Status::Invalid(std::string(who) + ": grid must be >= 0 (0 = SM count)");
  if (c.raster_group < 1 || c.raster_group > gemm::kMaxRasterGroup)
    return Status::Invalid(std::string(who) + ": raster_group must be in [1, " + std::to_string(gemm::kMaxRasterGroup) + "]");
  if (c.cluster < 0 || c.cluster > 2) return Status::Invalid(std::string(who) + ": cluster must be 0 (auto), 1 or 2");
  if (c.block_n != 0 && c.block_n != 128 && c.block_n != 256)
    return Status::Invalid(std::string(who) + ": block_n must be 0 (auto), 128 or 256 (got " +
                           std::to_string(c.block_n) + ")");
  return Status::Ok();
}

// Tile choice. Grouped: the group sizes live on the device, so the host cannot count tiles; the
// 128 x 256 tile is the default (the grouped GEMM exists for large groups; tiny ones can force
// bn=128). Dense: the tile with the lower cost = rounds of tiles over the SMs x the tile's work
// / its rate, where the 128 x 256 tile runs kWideTileRate times faster per FLOP (measured 1.08-1.15
// on full waves, docs/perf.md block-scaled v3), so it wins whenever its waves are not much
// emptier: 128 x 7168 x 2048 (28 wide tiles for 132 SMs) keeps 128 columns, M = 4096 takes 256.
constexpr double kWideTileRate = 1.10;

double dense_tile_cost(int64_t m, int64_t n, int block_n, int sms) {
  if (sms <= 0) sms = 1;  // an unknown SM count (a failed device query) must not divide by zero
  const int64_t tiles = ((m + 127) / 128) * ((n + block_n - 1) / block_n);
  const int64_t rounds = (tiles + sms - 1) / sms;
  return static_cast<double>(rounds) * block_n / (block_n == 256 ? kWideTileRate : 1.0);
}

Variant choose_variant(const BlockScaledConfig& c, bool grouped, int64_t m, int64_t n, int sms,
                       std::string* why = nullptr) {
  Variant v{c.block_n, c.cluster > 0 ? c.cluster : kDefaultCluster};
  double wide = 0.0, narrow = 0.0;
  if (v.block_n == 0) {
    if (grouped) {
      v.block_n = 256;
    } else {
      wide = dense_tile_cost(m, n, 256, sms);
      narrow = dense_tile_cost(m, n, 128, sms);
      v.block_n = wide <= narrow ? 256 : 128;
    }
  }
  // The reason is built only when asked for (a call asks nothing: no string work per call).
  if (why) {
    std::string reason = "forced";
    if (c.block_n == 0 && grouped) {
      reason = "grouped: group sizes are on the device; the wide tile by default";
    } else if (c.block_n == 0) {
      char buf[160];
      std::snprintf(buf, sizeof(buf), "cost (rounds x width / rate) bn=256 %.0f vs bn=128 %.0f on %d SMs", wide,
                    narrow, sms);
      reason = buf;
    }
    *why = "bn=" + std::to_string(v.block_n) + ",cluster=" + std::to_string(v.cluster) + " (" + reason + ")";
  }
  return v;
}

// The three maps of one problem. Boxes: A 128 x 128 bytes and B block_n x 128 bytes (one K
// block of one tile), D 64 rows x 128 bytes (the epilogue's store chunk).
struct MapShapes {
  hopper::TensorMap2dSpec a, b, d;
};

// With a cluster of c CTAs, each loads block_n / c rows of the B tile (and multicasts them).
MapShapes map_shapes(const void* a, const void* b, void* d, uint64_t m, uint64_t n, uint64_t k, OutType out,
                     Variant v) {
  MapShapes s;
  s.a.base = a;
  s.a.rows = m;
  s.a.cols = k;
  s.a.row_stride_bytes = k;
  s.a.box_rows = 128;
  s.a.box_cols = 128;
  s.b = s.a;
  s.b.base = b;
  s.b.rows = n;
  s.b.box_rows = static_cast<uint32_t>(v.block_n / v.cluster);
  const bool f32 = out == OutType::kFP32;
  s.d.base = d;
  s.d.dtype = f32 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  s.d.elem_bytes = f32 ? 4 : 2;
  s.d.rows = m;
  s.d.cols = n;
  s.d.row_stride_bytes = n * s.d.elem_bytes;
  s.d.box_rows = 64;
  s.d.box_cols = 128 / s.d.elem_bytes;
  s.d.l2_promotion = CU_TENSOR_MAP_L2_PROMOTION_NONE;
  return s;
}

// Templates for the grouped maps: box, swizzle, data type and L2 policy set once per output
// type; the device patches base, sizes and pitch per group. Encoded once per process (the
// base address is a placeholder the device always replaces); a failed encoding is not kept.
struct GroupedMaps {
  CUtensorMap a, b, d;
};
Status grouped_templates(OutType out, Variant v, const GroupedMaps** maps) {
  static OkOnce<GroupedMaps> cache[8];
  const int i = (out == OutType::kFP32 ? 1 : 0) + 2 * ((v.block_n == 256 ? 2 : 0) + v.cluster - 1);
  return cache[i].get(
      [out, v](GroupedMaps* m) {
        void* placeholder = reinterpret_cast<void*>(uintptr_t{1} << 20);
        const MapShapes s = map_shapes(placeholder, placeholder, placeholder, 128, 128, 128, out, v);
        LOWBIT_RETURN_IF_ERROR(hopper::make_tensor_map_2d(s.a, &m->a));
        LOWBIT_RETURN_IF_ERROR(hopper::make_tensor_map_2d(s.b, &m->b));
        return hopper::make_tensor_map_2d(s.d, &m->d);
      },
      maps);
}

}  // namespace

std::string BlockScaledConfig::to_string() const {
  return "grid=" + std::to_string(grid) + ",group=" + std::to_string(raster_group) + ",cluster=" +
         std::to_string(cluster) + ",bn=" + std::to_string(block_n);
}

std::string explain_blockscaled_choice(const BlockScaledConfig& config, bool grouped, int64_t m, int64_t n,
                                      int sm_count) {
  std::string why;
  choose_variant(config, grouped, m, n, sm_count, &why);
  return why;
}

Status parse_blockscaled_config(const std::string& text, BlockScaledConfig* out) {
  if (!out) return Status::Invalid("parse_blockscaled_config: out must be non-null");
  BlockScaledConfig c;
  LOWBIT_RETURN_IF_ERROR(parse_int_items(text, [&c](const std::string& key, int value) {
    if (key == "grid") c.grid = value;
    else if (key == "group") c.raster_group = value;
    else if (key == "cluster") c.cluster = value;
    else if (key == "bn") c.block_n = value;
    else return Status::Invalid("unknown block-scaled config key '" + key + "' (grid, group, cluster, bn)");
    return Status::Ok();
  }));
  LOWBIT_RETURN_IF_ERROR(check_config("parse_blockscaled_config", c));
  *out = c;
  return Status::Ok();
}

Status fp8_blockscaled_gemm(const Fp8BlockScaledArgs& x, cudaStream_t stream, const BlockScaledConfig* forced) {
  using check::extent;
  using check::Null;
  const char* who = "fp8_blockscaled_gemm";
  const BlockScaledConfig cfg = forced ? *forced : BlockScaledConfig{};
  check::ArgCheck c(who);
  gemm::gemm_shape(c, x.m, x.n, x.k, 16)
      .ptr("A", x.a, 16, Null::kRefused, extent(x.m, x.k))
      .ptr("B", x.b, 16, Null::kRefused, extent(x.n, x.k))
      .out("D", x.d, 16, extent(x.m, x.n, x.out_type == OutType::kFP32 ? 4 : 2))
      // The last K block's row ends after M scales, not sfa_ld.
      .ptr("sfa", x.sfa, 16, Null::kRefused,
           check::extent(4, check::extent_add(check::extent(check::ceil_div(x.k, 128) - 1, x.sfa_ld), x.m)))
      .ptr("sfb", x.sfb, 4, Null::kRefused, extent(check::ceil_div(x.n, 128), check::ceil_div(x.k, 128), 4))
      .rule(x.sfa_ld < x.m || x.sfa_ld % 4 != 0,
            [&] { return "sfa_ld must be >= M and a multiple of 4 (got " + std::to_string(x.sfa_ld) + ")"; })
      .rule(x.out_type != OutType::kBF16 && x.out_type != OutType::kFP32, [] { return std::string("out_type must be BF16 or FP32 (FP16 is fp8_gemm's alone)"); });
  LOWBIT_RETURN_IF_ERROR(c.status());
  LOWBIT_RETURN_IF_ERROR(check_config(who, cfg));
  const DeviceInfo* devp = nullptr;
  LOWBIT_RETURN_IF_ERROR(c.device(&devp));
  const DeviceInfo& dev = *devp;
  const Variant v = choose_variant(cfg, /*grouped=*/false, x.m, x.n, dev.sm_count);
  LOWBIT_RETURN_IF_ERROR(check_smem(dev, x.out_type, v));

  const int cluster = v.cluster;
  const MapShapes s = map_shapes(x.a, x.b, x.d, static_cast<uint64_t>(x.m), static_cast<uint64_t>(x.n),
                                 static_cast<uint64_t>(x.k), x.out_type, v);
  CUtensorMap tm_a, tm_b, tm_d;
  LOWBIT_RETURN_IF_ERROR(hopper::make_tensor_map_2d(s.a, &tm_a));
  LOWBIT_RETURN_IF_ERROR(hopper::make_tensor_map_2d(s.b, &tm_b));
  LOWBIT_RETURN_IF_ERROR(hopper::make_tensor_map_2d(s.d, &tm_d));

  const int tiles_m = static_cast<int>((x.m + 127) / 128);
  BlockScaledParams p{};
  p.cluster_m = cluster;
  p.group_m = cfg.raster_group;
  p.sched.tiles_m = (tiles_m + cluster - 1) / cluster;
  p.sched.tiles_n = static_cast<int>((x.n + v.block_n - 1) / v.block_n);
  p.sched.k_blocks = static_cast<int>((x.k + 127) / 128);
  p.sched.splits = 1;
  p.sched.group_m = std::min(cfg.raster_group, p.sched.tiles_m);
  p.m = static_cast<int>(x.m);
  p.n = static_cast<int>(x.n);
  p.sfa = x.sfa;
  p.sfa_ld = x.sfa_ld;
  p.sfb = x.sfb;
  const int64_t units = static_cast<int64_t>(p.sched.tiles_m) * p.sched.tiles_n;
  if (units > gemm::kMaxUnits) return Status::Invalid(std::string(who) + ": 2^30 output tiles or more");
  const cudaError_t e = launch_for<false>(x.out_type, v, cfg.grid, static_cast<int>(units), stream, tm_a, tm_b,
                                          tm_d, p, dev.device);
  if (e != cudaSuccess) return gemm::cuda_error("fp8_blockscaled_gemm launch", e);
  return Status::Ok();
}

size_t fp8_grouped_workspace_size(int max_groups) {
  return max_groups > 0 ? blockscaled::GroupedWorkspace::bytes(max_groups) : 0;
}

Status fp8_grouped_validate(const Fp8GroupedProblem* problems, int groups) {
  LOWBIT_RETURN_IF_ERROR(check::ArgCheck("fp8_grouped_gemm")
                             .dim("groups", groups, 1, gemm::kMaxGroups)
                             .ptr("the problem array", problems, alignof(Fp8GroupedProblem))
                             .status());
  for (int g = 0; g < groups; ++g) {
    const int err = blockscaled::check_group(problems[g]);
    if (err != blockscaled::kGroupOk)
      return Status::Invalid("fp8_grouped_gemm: group " + std::to_string(g) + ": " + blockscaled::group_error_text(err));
  }
  return Status::Ok();
}

Status fp8_grouped_gemm(const Fp8GroupedProblem* problems, int groups, OutType out_type, void* workspace,
                        size_t workspace_bytes, cudaStream_t stream, const BlockScaledConfig* forced) {
  const char* who = "fp8_grouped_gemm";
  const BlockScaledConfig cfg = forced ? *forced : BlockScaledConfig{};
  check::ArgCheck c(who);
  c.dim("groups", groups, 1, gemm::kMaxGroups)
      .ptr("the problem array", problems, alignof(Fp8GroupedProblem), check::Null::kRefused,
           check::extent(groups, sizeof(Fp8GroupedProblem)))
      .out("workspace", workspace, 128, check::extent_of(workspace_bytes))
      .rule(workspace_bytes < fp8_grouped_workspace_size(groups), StatusCode::kWorkspaceTooSmall,
            [&] {
              return std::to_string(groups) + " groups need " + std::to_string(fp8_grouped_workspace_size(groups)) +
                     " bytes of workspace, got " + std::to_string(workspace_bytes);
            })
      .rule(out_type != OutType::kBF16 && out_type != OutType::kFP32, [] { return std::string("out_type must be BF16 or FP32 (FP16 is fp8_gemm's alone)"); });
  LOWBIT_RETURN_IF_ERROR(c.status());
  LOWBIT_RETURN_IF_ERROR(check_config(who, cfg));
  const DeviceInfo* devp = nullptr;
  LOWBIT_RETURN_IF_ERROR(c.device(&devp));
  const DeviceInfo& dev = *devp;
  const Variant v = choose_variant(cfg, /*grouped=*/true, 0, 0, dev.sm_count);
  LOWBIT_RETURN_IF_ERROR(check_smem(dev, out_type, v));
  const int cluster = v.cluster;
  const GroupedMaps* tmpl = nullptr;
  LOWBIT_RETURN_IF_ERROR(grouped_templates(out_type, v, &tmpl));

  const blockscaled::GroupedWorkspace ws = blockscaled::GroupedWorkspace::at(workspace, groups);
  const int out_bytes = out_type == OutType::kFP32 ? 4 : 2;
  cudaError_t e =
      hopper::launch_kernel(blockscaled::grouped_prepare_kernel, dim3(1), dim3(blockscaled::kPrepareThreads), 0, stream,
                            /*pdl=*/false, problems, groups, ws, out_bytes, cluster, v.block_n, tmpl->a, tmpl->b, tmpl->d);
  if (e != cudaSuccess) return gemm::cuda_error("fp8_grouped_gemm prepare launch", e);

  BlockScaledParams p{};
  p.cluster_m = cluster;
  p.group_m = cfg.raster_group;
  p.problems = problems;
  p.groups = groups;
  p.tile_start = ws.tile_start;
  p.maps = ws.maps;
  // The unit count is known only on the device: every CTA that fits, idle ones exit at once.
  e = launch_for<true>(out_type, v, cfg.grid, 0, stream, tmpl->a, tmpl->b, tmpl->d, p, dev.device);
  if (e != cudaSuccess) return gemm::cuda_error("fp8_grouped_gemm launch", e);
  return Status::Ok();
}

Status fp8_grouped_check_status(const void* workspace, cudaStream_t stream) {
  static_assert(blockscaled::kGroupOk == 0, "status word: 0 is Ok");
  return gemm::read_grouped_status(workspace, stream, "fp8_grouped_check_status", "fp8_grouped_gemm",
                                   blockscaled::group_error_text);
}

}  // namespace lowbit
