// Host side of the NVFP4 GEMM: argument checks, config choice, weight prepack, activation
// dequantization (NVFP4 activations), tensor map, launch. Stream-ordered; no allocation and no
// synchronization.
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "common/key_value.h"
#include "formats/nvfp4_device.cuh"
#include "gemm/launch_common.h"
#include "gemm/nvfp4/activations.cuh"
#include "gemm/nvfp4/nvfp4_variants_gen.h"
#include "gemm/nvfp4/traits.cuh"
#include "gemm/nvfp4/variants.h"
#include "hopper/cluster_launch.h"
#include "hopper/grid_dependency.cuh"
#include "hopper/tensor_map.h"
#include "common/device_cache.h"
#include "lowbit/device.h"
#include "lowbit/nvfp4.h"

namespace lowbit {
namespace {

using nvfp4::kBlockK;
using nvfp4::kTileRows;

int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0); }

// The largest M, N or K: below 2^30, so the kernels' int tile and index arithmetic cannot wrap.
constexpr int64_t kMaxNvfp4Dim = INT_MAX / 2;

// The shapes nvfp4_gemm runs, checked alike by the call, its chooser and its size query.
check::ArgCheck& nvfp4_shape(check::ArgCheck& c, int64_t m, int64_t n, int64_t k) {
  return gemm::gemm_shape(c, m, n, k, 32, kMaxNvfp4Dim);
}

// ---- weight prepack ------------------------------------------------------------------------

__device__ __forceinline__ uint8_t scale_at(const uint8_t* scales, bool swizzled, int64_t row, int64_t kblock,
                                            int64_t kblocks) {
  if (!swizzled) return scales[row * kblocks + kblock];
  const int64_t atoms_k = (kblocks + 3) / 4;
  const int64_t atom = (row / 128) * atoms_k + kblock / 4;
  const int64_t r = row % 128;
  return scales[atom * 512 + 16 * (r % 32) + 4 * (r / 32) + kblock % 4];
}

// One thread per (tile, K block, warpgroup chunk, consumer thread); see nvfp4/traits.cuh.
__global__ void nvfp4_prepack_kernel(const uint8_t* __restrict__ packed, const uint8_t* __restrict__ scales,
                                     bool swizzled, int64_t n, int64_t k, int k_blocks, int64_t total,
                                     uint8_t* __restrict__ out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const int t = static_cast<int>(i % 128);
  const int c = static_cast<int>((i / 128) % 2);
  const int64_t kb = (i / 256) % k_blocks;
  const int64_t tile = i / (256 * static_cast<int64_t>(k_blocks));
  const int q = t % 4;
  const int r0 = 16 * (t / 32) + (t % 32) / 4;
  const int64_t row_base = tile * kTileRows + c * 64;
  const int64_t row_bytes = k / 2;
  const int64_t kblocks16 = k / 16;
  uint8_t* chunk = out + ((tile * k_blocks + kb) * 2 + c) * nvfp4::kChunkBytes;
#pragma unroll
  for (int plane = 0; plane < 2; ++plane) {
    const int64_t row = row_base + r0 + 8 * plane;
    uint32_t word[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      word[j] = 0;
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int s = 2 * j + u / 2, h = u % 2;
        const int64_t kbyte = kb * 64 + 8 * s + q + 4 * h;
        const uint32_t b = (row < n && kbyte < row_bytes) ? packed[row * row_bytes + kbyte] : 0u;
        word[j] |= ((b & 0xFu) << (4 * u)) | ((b >> 4) << (16 + 4 * u));
      }
    }
    *reinterpret_cast<uint4*>(chunk + plane * nvfp4::kPlaneBytes + t * 16) = make_uint4(word[0], word[1], word[2], word[3]);
  }
  if (t < 64) {
    const int64_t row = row_base + t;
    uint8_t sb[8];
#pragma unroll
    for (int s = 0; s < 8; ++s) {
      const int64_t kblk = kb * 8 + s;
      sb[s] = (row < n && kblk < kblocks16) ? scale_at(scales, swizzled, row, kblk, kblocks16) : 0;
    }
    *reinterpret_cast<uint2*>(chunk + nvfp4::kScaleOffset + t * 8) = *reinterpret_cast<const uint2*>(sb);
  }
}

// ---- NVFP4 activations -> BF16 (exact: e2m1 * e4m3 fits BF16) ------------------------------

// One thread per block of 16 values.
__global__ void nvfp4_activations_to_bf16(const uint8_t* __restrict__ packed, const uint8_t* __restrict__ scales,
                                          int64_t blocks, __nv_bfloat16* __restrict__ out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < blocks) nvfp4::act_block_to_bf16(packed, scales, i, out);
}

// ---- variants and config -------------------------------------------------------------------

const nvfp4::Nvfp4Variant* find_variant(int tokens) { return nvfp4::find_nvfp4_variant(tokens); }

// FP32 split-K partials: each split of each 128-row x `tokens` tile.
size_t partials_bytes(int64_t tiles, int splits, int tokens) {
  return static_cast<size_t>(tiles) * splits * 256 * (tokens / 2) * 4;
}

}  // namespace

namespace nvfp4 {
const Nvfp4Variant* find_nvfp4_variant(int tokens) {
  // The compiled token tiles (variants.def), each with its generated translation unit's launchers.
  static const std::array<Nvfp4Variant, kNumNvfp4VariantSpecs> variants = [] {
    std::array<Nvfp4Variant, kNumNvfp4VariantSpecs> v{};
    for (int i = 0; i < kNumNvfp4VariantSpecs; ++i) {
      const VariantLauncher& l = kNvfp4VariantLaunchers[i]();
      v[i] = {kNvfp4VariantSpecs[i].tokens, l.stages, l.smem_bytes, l.dense, l.grouped, kNvfp4VariantSpecs[i].reason};
    }
    return v;
  }();
  for (const auto& v : variants)
    if (v.tokens == tokens) return &v;
  return nullptr;
}

std::string nvfp4_tile_list(bool grouped) {
  return gemm::token_tile_list(kNvfp4VariantSpecs, [grouped](int tokens) {
    return !grouped || find_nvfp4_variant(tokens)->launch_grouped != nullptr;
  });
}
}  // namespace nvfp4

std::string Nvfp4GemmConfig::to_string() const {
  std::ostringstream os;
  os << "tokens=" << block_tokens << ",splits=" << splits;
  return os.str();
}

Status parse_nvfp4_config(const std::string& text, Nvfp4GemmConfig* out) {
  if (!out) return Status::Invalid("parse_nvfp4_config: out must be non-null");
  Nvfp4GemmConfig c;
  // Whole integers only, as every config parser (atoi read "splits=4x" as 4 and wrapped values
  // past 2^31).
  LOWBIT_RETURN_IF_ERROR(parse_int_items(text, [&c](const std::string& key, int value) {
    if (key == "tokens") c.block_tokens = value;
    else if (key == "splits") c.splits = value;
    else return Status::Invalid("nvfp4 config: unknown key '" + key + "' (tokens, splits)");
    return Status::Ok();
  }));
  if (!find_variant(c.block_tokens)) return Status::Invalid("nvfp4 config: tokens must be " + nvfp4::nvfp4_tile_list());
  if (c.splits < 1) return Status::Invalid("nvfp4 config: splits must be >= 1");
  c.reason = "forced";
  *out = c;
  return Status::Ok();
}

namespace {

// Relative mainloop time of one tile's K block: a 256-token tile costs 1.72x a 128-token one for
// twice the MMAs (same-run A/B on eight M >= 512 shapes, docs/perf.md W4 v6: the weights are
// dequantized once per 256 tokens instead of per 128).
double nvfp4_kblock_cost(int tokens) { return tokens == 256 ? 1.72 : 1.0; }

struct Nvfp4Candidate {
  int tokens, splits;
  int64_t units;
  double fill, cost;
};

// Split K into the largest one-wave fill (units <= SMs), keeping >= 4 K blocks per unit: every
// unit pays a pipeline fill and a fix-up, and the dense kernel is not persistent, so a second
// wave costs more than the SMs a single wave leaves idle (at M = 1 and 16, 2 splits and 112
// units measured 1.2x faster than 7 splits filling 3 waves to 99%; docs/perf.md W4 v4).
// Where the tiles alone exceed a wave, K is not split. Cost: waves x K blocks per unit x the
// token tile's K-block cost. The cost counts no fix-up, so a tile that may not split is scored
// unsplit: 256-token tiles split 2-5 ways (the per-group loop of W5: 192 and 320 x 3072 x 4096,
// 384 x 4096 x 1536) ran ~1.4x slower than 128-token ones, which the cost called 1.2-1.4x
// faster. Their partials are 128 KiB per unit, and a 3-stage ring refills for every unit.
Nvfp4Candidate nvfp4_candidate(int tokens, bool may_split, int64_t m, int64_t n, int64_t k, int sms) {
  const int64_t tiles = ceil_div(n, kTileRows) * ceil_div(m, tokens);
  const int64_t kb = ceil_div(k, kBlockK);
  Nvfp4Candidate c{tokens, 1, tiles, static_cast<double>(tiles) / (ceil_div(tiles, sms) * sms), 0.0};
  for (int s = 2; may_split && s <= 16 && kb / s >= 4 && tiles * s <= sms; ++s) {
    const double fill = static_cast<double>(tiles * s) / sms;
    if (fill > c.fill + 1e-9) {
      c.splits = s;
      c.fill = fill;
    }
  }
  c.units = tiles * c.splits;
  c.cost = static_cast<double>(ceil_div(c.units, sms)) * static_cast<double>(ceil_div(kb, c.splits)) *
           nvfp4_kblock_cost(tokens);
  return c;
}

}  // namespace

Status choose_nvfp4_config(int64_t m, int64_t n, int64_t k, Nvfp4GemmConfig* out) {
  // The shapes nvfp4_gemm runs (a chooser that answered for others invited calls it refuses).
  check::ArgCheck args("choose_nvfp4_config");
  args.rule(!out, [] { return std::string("out must be non-null"); });
  LOWBIT_RETURN_IF_ERROR(nvfp4_shape(args, m, n, k).status());
  const DeviceInfo* devp = nullptr;
  LOWBIT_RETURN_IF_ERROR(current_hopper(&devp));
  const DeviceInfo& dev = *devp;
  // The smallest tile >= M up to 128; past 128 tokens, 128 or 256, whichever the cost says
  // (128 on a tie within 3%: the narrower tile has the deeper ring).
  const int small = m <= 16 ? 16 : m <= 32 ? 32 : m <= 64 ? 64 : 128;
  Nvfp4Candidate best = nvfp4_candidate(small, true, m, n, k, dev.sm_count);
  std::ostringstream why;
  if (m > 128) {
    const Nvfp4Candidate wide = nvfp4_candidate(256, false, m, n, k, dev.sm_count);
    why << "tokens 128 costs " << best.cost << ", tokens 256 unsplit " << wide.cost
        << " (waves x K blocks x tile cost); ";
    if (wide.cost < 0.97 * best.cost) best = wide;
  } else {
    why << "tokens " << best.tokens << " (smallest tile >= M); ";
  }
  why << "splits " << best.splits << ": " << best.units << " units fill " << static_cast<int>(best.fill * 100 + 0.5)
      << (best.units <= dev.sm_count ? "% of one wave on " : "% of their waves on ") << dev.sm_count << " SMs";
  Nvfp4GemmConfig c;
  c.block_tokens = best.tokens;
  c.splits = best.splits;
  c.reason = why.str();
  *out = c;
  return Status::Ok();
}

size_t nvfp4_prepacked_bytes(int64_t n, int64_t k) {
  if (n <= 0 || k <= 0) return 0;
  // Saturated: a size query never wraps to a smaller count.
  return check::sat_mul(check::sat_mul(check::sat_size(ceil_div(n, kTileRows)), check::sat_size(ceil_div(k, kBlockK))),
                        nvfp4::kWeightStageBytes);
}

size_t nvfp4_gemm_workspace_size(int64_t m, int64_t n, int64_t k, bool nvfp4_activations,
                                 const Nvfp4GemmConfig& c) {
  // A shape or config nvfp4_gemm refuses needs nothing (within those shapes nothing overflows).
  check::ArgCheck shape("nvfp4_gemm_workspace_size");
  if (!nvfp4_shape(shape, m, n, k).ok() || !find_variant(c.block_tokens) || c.splits < 1 ||
      c.splits > ceil_div(k, kBlockK))
    return 0;
  if (!gemm::check_split_tiles("", ceil_div(n, kTileRows) * ceil_div(m, static_cast<int64_t>(c.block_tokens)), c.splits)
           .ok())
    return 0;
  // The split-K counter region comes first whenever a workspace is used, so nothing this call
  // stages lands on another call's counters (gemm::kSplitKCounterBytes).
  if (c.splits <= 1 && !nvfp4_activations) return 0;
  size_t bytes = gemm::kSplitKCounterBytes;
  if (c.splits > 1) {
    const int64_t tiles = ceil_div(n, kTileRows) * ceil_div(m, c.block_tokens);
    bytes += partials_bytes(tiles, c.splits, c.block_tokens);
  }
  if (nvfp4_activations) bytes += static_cast<size_t>(ceil_div(static_cast<int64_t>(m) * k * 2, 256) * 256);
  return bytes;
}

Status nvfp4_prepack_weights(const Nvfp4PrepackArgs& a, cudaStream_t stream) {
  check::ArgCheck c("nvfp4_prepack_weights");
  c.dim("N", a.n, 1, kMaxNvfp4Dim)
      .dim("K", a.k, 32, kMaxNvfp4Dim)
      .ptr("packed", a.packed, 1, check::Null::kRefused, check::extent(a.n, a.k / 2))
      .ptr("scales", a.scales, 1, check::Null::kRefused,
           a.scales_swizzled ? check::extent(check::ceil_div(a.n, 128), 128, check::ceil_div(a.k / 16, 4), 4)
                             : check::extent(a.n, a.k / 16))
      .out("out", a.out, 16, check::extent_of(a.out_bytes))
      .rule(a.out_bytes < nvfp4_prepacked_bytes(a.n, a.k), [&] {
        return "out holds " + std::to_string(a.out_bytes) + " bytes, needs " +
               std::to_string(nvfp4_prepacked_bytes(a.n, a.k));
      });
  LOWBIT_RETURN_IF_ERROR(c.device());
  const int k_blocks = static_cast<int>(ceil_div(a.k, kBlockK));
  const int64_t total = ceil_div(a.n, kTileRows) * k_blocks * 256;
  const cudaError_t e = hopper::launch_kernel(
      nvfp4_prepack_kernel, dim3(static_cast<unsigned>(ceil_div(total, 256))), dim3(256), 0, stream, /*pdl=*/false,
      static_cast<const uint8_t*>(a.packed), static_cast<const uint8_t*>(a.scales), a.scales_swizzled, a.n, a.k,
      k_blocks, total, static_cast<uint8_t*>(a.out));
  if (e != cudaSuccess) return gemm::cuda_error("nvfp4_prepack_weights launch", e);
  return Status::Ok();
}

Status nvfp4_gemm(const Nvfp4GemmArgs& a, cudaStream_t stream, const Nvfp4GemmConfig* forced) {
  using check::extent;
  using check::Null;
  const bool fp4_act = a.a_packed != nullptr || a.a_scales != nullptr;
  check::ArgCheck c("nvfp4_gemm");
  nvfp4_shape(c, a.m, a.n, a.k)
      .rule(fp4_act == (a.a_bf16 != nullptr),
            [] { return std::string("give either a_bf16, or a_packed with a_scales"); })
      .rule(fp4_act && (!a.a_packed || !a.a_scales),
            [&] {
              return std::string("NVFP4 activations need both a_packed and a_scales (") +
                     (a.a_packed ? "a_scales" : "a_packed") + " is null)";
            })
      .ptr("a_bf16", a.a_bf16, 16, Null::kAllowed, extent(a.m, a.k, 2))
      .ptr("a_packed", a.a_packed, 16, Null::kAllowed, extent(a.m, a.k / 2))
      .ptr("a_scales", a.a_scales, 1, Null::kAllowed, extent(a.m, a.k / 16))
      .ptr("b_prepacked", a.b_prepacked, 16, Null::kRefused, check::extent_of(nvfp4_prepacked_bytes(a.n, a.k)))
      .out("d", a.d, 16, extent(a.m, a.n, 2))
      .finite("a_global_scale", fp4_act ? a.a_global_scale : 1.0f)
      .finite("b_global_scale", a.b_global_scale)
      .rule(!formats::nvfp4_global_scales_ok(fp4_act ? a.a_global_scale : 1.0f, a.b_global_scale),
            [] {
              return std::string("global scales must be finite and > 0, with a_global_scale * b_global_scale * 256 "
                                 "(the kernel's one FP32 factor) a normal FP32 value");
            })
      .rule(a.workspace_bytes > 0 && !a.workspace,
            [] { return std::string("workspace_bytes > 0 with a null workspace"); })
      .out("workspace", a.workspace, 16, check::extent_of(a.workspace_bytes), Null::kAllowed);
  const DeviceInfo* devp = nullptr;
  LOWBIT_RETURN_IF_ERROR(c.device(&devp));
  const DeviceInfo& dev = *devp;
  Nvfp4GemmConfig cfg;
  if (forced) {
    cfg = *forced;
  } else {
    LOWBIT_RETURN_IF_ERROR(choose_nvfp4_config(a.m, a.n, a.k, &cfg));
    // Fall back to no split when the caller's workspace cannot hold the partials.
    if (nvfp4_gemm_workspace_size(a.m, a.n, a.k, fp4_act, cfg) > a.workspace_bytes) cfg.splits = 1;
  }
  const nvfp4::Nvfp4Variant* v = find_variant(cfg.block_tokens);
  if (!v) return Status::Invalid("nvfp4_gemm: block_tokens must be " + nvfp4::nvfp4_tile_list());
  const int k_blocks = static_cast<int>(ceil_div(a.k, kBlockK));
  if (cfg.splits < 1 || cfg.splits > k_blocks)
    return Status::Invalid("nvfp4_gemm: splits must be in [1, K/128 rounded up = " + std::to_string(k_blocks) + "]");
  LOWBIT_RETURN_IF_ERROR(gemm::check_split_tiles(
      "nvfp4_gemm", ceil_div(a.n, kTileRows) * ceil_div(a.m, static_cast<int64_t>(cfg.block_tokens)), cfg.splits));
  const size_t need = nvfp4_gemm_workspace_size(a.m, a.n, a.k, fp4_act, cfg);
  if (need > a.workspace_bytes)
    return Status::Error(StatusCode::kWorkspaceTooSmall, "nvfp4_gemm: config " + cfg.to_string() + " needs " +
                                                             std::to_string(need) + " bytes of workspace, got " +
                                                             std::to_string(a.workspace_bytes));
  if (static_cast<size_t>(v->smem) > dev.smem_per_block_optin)
    return Status::Error(StatusCode::kUnsupportedDevice, "nvfp4_gemm: kernel needs " + std::to_string(v->smem) +
                                                             " bytes of shared memory per block; the device allows " +
                                                             std::to_string(dev.smem_per_block_optin));

  nvfp4::Nvfp4KernelParams p{};
  p.m = static_cast<int>(a.m);
  p.n = static_cast<int>(a.n);
  p.k = static_cast<int>(a.k);
  p.k_blocks = k_blocks;
  p.tiles_n = static_cast<int>(ceil_div(a.n, kTileRows));
  p.tiles_m = static_cast<int>(ceil_div(a.m, cfg.block_tokens));
  p.splits = cfg.splits;
  p.weights = static_cast<const uint8_t*>(a.b_prepacked);
  p.alpha = (fp4_act ? a.a_global_scale : 1.0f) * a.b_global_scale * formats::kNvfp4DequantCompensation;
  p.d = static_cast<__nv_bfloat16*>(a.d);
  char* ws = static_cast<char*>(a.workspace);
  const int64_t tiles = static_cast<int64_t>(p.tiles_n) * p.tiles_m;
  if (cfg.splits > 1) p.tile_counters = reinterpret_cast<int*>(ws);
  if (cfg.splits > 1 || fp4_act) ws += gemm::kSplitKCounterBytes;  // the counter region (nvfp4_gemm_workspace_size)
  if (cfg.splits > 1) {
    p.partials = reinterpret_cast<float*>(ws);
    ws += partials_bytes(tiles, cfg.splits, cfg.block_tokens);
  }
  // NVFP4 activations are dequantized into the workspace, launched only once every check below
  // has passed (a refused call leaves the workspace as it was).
  const void* act = fp4_act ? static_cast<const void*>(ws) : a.a_bf16;

  CUtensorMap tm_act;
  hopper::TensorMap2dSpec s;
  s.base = act;
  s.dtype = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  s.elem_bytes = 2;
  s.rows = static_cast<uint64_t>(a.m);
  s.cols = static_cast<uint64_t>(a.k);
  s.row_stride_bytes = static_cast<uint64_t>(a.k) * 2;
  s.box_rows = static_cast<uint32_t>(cfg.block_tokens);
  s.box_cols = 64;
  LOWBIT_RETURN_IF_ERROR(hopper::make_tensor_map_2d(s, &tm_act));

  const int64_t units = tiles * cfg.splits;
  if (units > INT_MAX) return Status::Invalid("nvfp4_gemm: too many work units");
  if (fp4_act) {
    const int64_t blocks = a.m * a.k / 16;
    const cudaError_t e = hopper::launch_kernel(
        nvfp4_activations_to_bf16, dim3(static_cast<unsigned>(ceil_div(blocks, 256))), dim3(256), 0, stream,
        /*pdl=*/false, static_cast<const uint8_t*>(a.a_packed), static_cast<const uint8_t*>(a.a_scales), blocks,
        reinterpret_cast<__nv_bfloat16*>(ws));
    if (e != cudaSuccess) return gemm::cuda_error("nvfp4_gemm activation staging launch", e);
  }
  // One CTA per unit (the dense kernel computes unit blockIdx.x).
  const cudaError_t e = v->launch_dense(static_cast<int>(units), stream, tm_act, p);
  const auto describe = [&] {
    return "nvfp4_gemm " + std::to_string(a.m) + "x" + std::to_string(a.n) + "x" + std::to_string(a.k) + " " +
           cfg.to_string();
  };
  return gemm::launch_status(e, describe, static_cast<int>(units), units);
}

}  // namespace lowbit
