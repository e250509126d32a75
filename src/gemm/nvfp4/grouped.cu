// Host side of the grouped NVFP4 GEMM: argument checks, config choice, the activation map
// template, and the launches (preparation, with the activation pass in an NVFP4 call; persistent
// GEMM), all on the caller's stream; no allocation and no synchronization (except
// nvfp4_grouped_check_status, which exists to synchronize).
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

#include "common/ok_once.h"
#include "formats/nvfp4_device.cuh"
#include "gemm/nvfp4/grouped_prepare.cuh"
#include "gemm/launch_common.h"
#include "gemm/nvfp4/traits.cuh"
#include "gemm/nvfp4/variants.h"
#include "hopper/grid_dependency.cuh"
#include "hopper/tensor_map.h"
#include "common/device_cache.h"
#include "lowbit/device.h"
#include "lowbit/nvfp4.h"

namespace lowbit {
namespace {

// The activation map of a token tile (BF16, boxes of tokens x 64, 128-byte swizzle), encoded once
// per process; the device patches base, sizes and pitch per group (the base is a placeholder).
// The box height must be the kernel's token tile: a shorter box would deliver fewer bytes than
// the stage's barrier expects, and the consumers would wait forever.
Status act_template(int tokens, const CUtensorMap** out) {
  constexpr int kTiles = 5;  // 16, 32, 64, 128, 256
  static OkOnce<CUtensorMap> cache[kTiles];
  int i = 0;
  while (i < kTiles && (16 << i) != tokens) ++i;
  if (i == kTiles) return Status::Invalid("nvfp4 grouped: no activation map for a token tile of " + std::to_string(tokens));
  return cache[i].get(
      [tokens](CUtensorMap* m) {
        hopper::TensorMap2dSpec s;
        s.base = reinterpret_cast<void*>(uintptr_t{1} << 20);
        s.dtype = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
        s.elem_bytes = 2;
        s.rows = 128;
        s.cols = 128;
        s.row_stride_bytes = 256;
        s.box_rows = static_cast<uint32_t>(tokens);
        s.box_cols = 64;
        return hopper::make_tensor_map_2d(s, m);
      },
      out);
}

}  // namespace

size_t nvfp4_grouped_workspace_size(int max_groups, int64_t max_activation_elements) {
  if (max_groups <= 0 || max_activation_elements < 0 || max_activation_elements > kNvfp4MaxStagedElements) return 0;
  return nvfp4::GroupedWorkspace::bytes(max_groups, max_activation_elements);
}

Status choose_nvfp4_grouped_config(const Nvfp4GroupedArgs& a, Nvfp4GemmConfig* out) {
  LOWBIT_RETURN_IF_ERROR(check::ArgCheck("choose_nvfp4_grouped_config")
                             .rule(!out, [] { return std::string("out must be non-null"); })
                             .dim("expected_m", a.expected_m, 1, INT64_MAX, 0)
                             .status());
  const DeviceInfo* devp = nullptr;
  LOWBIT_RETURN_IF_ERROR(current_hopper(&devp));
  const DeviceInfo& dev = *devp;
  Nvfp4GemmConfig c;
  const int64_t m = a.expected_m > 0 ? a.expected_m : 128;
  c.block_tokens = m <= 16 ? 16 : m <= 32 ? 32 : m <= 64 ? 64 : 128;
  c.splits = 1;
  std::ostringstream why;
  why << "grouped: tokens " << c.block_tokens << " (smallest tile >= "
      << (a.expected_m > 0 ? "the expected M " : "M = 128, the sizes being on the device, ") << m
      << "), no K split (the groups' tiles fill the " << dev.sm_count << " SMs)";
  c.reason = why.str();
  *out = c;
  return Status::Ok();
}

Status nvfp4_grouped_validate(const Nvfp4GroupedProblem* problems, int groups, bool nvfp4_activations) {
  const char* who = "nvfp4_grouped_gemm";
  LOWBIT_RETURN_IF_ERROR(check::ArgCheck(who)
                             .dim("groups", groups, 1, gemm::kMaxGroups)
                             .ptr("the problem array", problems, alignof(Nvfp4GroupedProblem))
                             .status());
  for (int g = 0; g < groups; ++g) {
    const int err = nvfp4::check_group(problems[g], nvfp4_activations);
    if (err != nvfp4::kGroupOk)
      return Status::Invalid(std::string(who) + ": group " + std::to_string(g) + ": " + nvfp4::group_error_text(err));
  }
  return Status::Ok();
}

Status nvfp4_grouped_gemm(const Nvfp4GroupedArgs& a, cudaStream_t stream, const Nvfp4GemmConfig* forced) {
  const std::string who = "nvfp4_grouped_gemm";
  const int64_t capacity = a.nvfp4_activations ? a.max_activation_elements : 0;
  check::ArgCheck c(who.c_str());
  c.dim("groups", a.groups, 1, gemm::kMaxGroups)
      .ptr("the problem array", a.problems, alignof(Nvfp4GroupedProblem), check::Null::kRefused,
           check::extent(a.groups, sizeof(Nvfp4GroupedProblem)))
      .dim("max_activation_elements", a.max_activation_elements, 1, kNvfp4MaxStagedElements, 0)
      .out("workspace", a.workspace, 256, check::extent_of(a.workspace_bytes))
      // The smallest non-empty group (M = 1, K = 32) stages 32 elements: a smaller capacity would
      // pass here and then refuse every group on the device.
      .rule(a.nvfp4_activations && a.max_activation_elements < 32,
            [&] {
              return "nvfp4_activations needs max_activation_elements >= 32 (the staged BF16 copy; got " +
                     std::to_string(a.max_activation_elements) + ")";
            })
      .rule(a.workspace_bytes < nvfp4_grouped_workspace_size(a.groups, capacity), StatusCode::kWorkspaceTooSmall, [&] {
        return std::to_string(a.groups) + " groups" +
               (a.nvfp4_activations ? " and " + std::to_string(capacity) + " staged activations" : std::string()) +
               " need " + std::to_string(nvfp4_grouped_workspace_size(a.groups, capacity)) +
               " bytes of workspace, got " + std::to_string(a.workspace_bytes);
      });
  const DeviceInfo* devp = nullptr;
  LOWBIT_RETURN_IF_ERROR(c.device(&devp));
  const DeviceInfo& dev = *devp;
  Nvfp4GemmConfig cfg;
  if (forced) cfg = *forced;
  else LOWBIT_RETURN_IF_ERROR(choose_nvfp4_grouped_config(a, &cfg));
  const nvfp4::Nvfp4Variant* v = nvfp4::find_nvfp4_variant(cfg.block_tokens);
  if (!v || !v->launch_grouped)
    return Status::Invalid(who + ": block_tokens must be " + nvfp4::nvfp4_tile_list(/*grouped=*/true) +
                           " (the others are dense only)");
  if (cfg.splits != 1) return Status::Invalid(who + ": grouped calls do not split K (splits must be 1)");
  if (static_cast<size_t>(v->smem) > dev.smem_per_block_optin)
    return Status::Error(StatusCode::kUnsupportedDevice, who + ": kernel needs " + std::to_string(v->smem) +
                                                             " bytes of shared memory per block; the device allows " +
                                                             std::to_string(dev.smem_per_block_optin));
  const CUtensorMap* tmpl = nullptr;
  LOWBIT_RETURN_IF_ERROR(act_template(cfg.block_tokens, &tmpl));

  const nvfp4::GroupedWorkspace ws = nvfp4::GroupedWorkspace::at(a.workspace, a.groups, capacity);
  // Both kernels of the call launch with PDL (the first unless a.pdl_first is false) and wait
  // before touching global memory. An NVFP4 call's preparation grid-strides over the
  // activations: a few CTAs per SM cover any total without knowing it on the host; otherwise
  // one CTA scans.
  const int prepare_grid = a.nvfp4_activations ? dev.sm_count * 4 : 1;
  cudaError_t e = hopper::launch_kernel(nvfp4::grouped_prepare_kernel, dim3(prepare_grid),
                                        dim3(nvfp4::kPrepareThreads), 0, stream, a.pdl_first, a.problems, a.groups,
                                        a.nvfp4_activations, cfg.block_tokens, ws, *tmpl);
  if (e != cudaSuccess) return gemm::cuda_error(who + " prepare launch", e);

  nvfp4::Nvfp4KernelParams p{};
  p.splits = 1;
  p.alpha = formats::kNvfp4DequantCompensation;
  p.problems = a.problems;
  p.groups = a.groups;
  p.nvfp4_activations = a.nvfp4_activations;
  p.tile_start = ws.tile_start;
  p.act_maps = ws.maps;
  // Persistent: one CTA per SM walks the groups' tiles (their count is known on the device only).
  e = v->launch_grouped(dev.sm_count, stream, *tmpl, p);
  return gemm::launch_status(
      e, [&] { return who + " G=" + std::to_string(a.groups) + " " + cfg.to_string(); }, dev.sm_count, -1);
}

Status nvfp4_grouped_check_status(const void* workspace, cudaStream_t stream) {
  static_assert(nvfp4::kGroupOk == 0, "status word: 0 is Ok");
  return gemm::read_grouped_status(workspace, stream, "nvfp4_grouped_check_status", "nvfp4_grouped_gemm",
                                   nvfp4::group_error_text);
}

}  // namespace lowbit
