// NVFP4 GEMM on Hopper: E2M1 values (two per byte, low nibble first), one E4M3 scale per 16
// consecutive elements along K, one FP32 global scale per tensor. Hopper has no FP4 tensor cores,
// so the kernel dequantizes the weights in registers (E2M1 x E4M3 is exact in BF16) and runs BF16
// WGMMA with the activations; the weight stream is half the bytes of FP8.
//
//   D[M, N] (BF16) = g_a * g_b * sum_k a[m, k] * w[n, k]
//
// with w = e2m1 * scale the dequantized weight and a either BF16 (W4A16) or NVFP4 (then a is
// dequantized to BF16 in a first pass, exactly, into the caller's workspace).
//
// Scale bytes are unsigned E4M3 magnitudes, in the weights and the activations alike: the sign
// bit is ignored and 0x7F (E4M3's NaN, which no NVFP4 quantizer writes) reads as 480.
//
// The weights are prepacked once (nvfp4_prepack_weights, on the device) into the kernel's layout:
// per 128-row tile and 128-wide K block, each consumer thread's fragment bytes contiguous, so the
// mainloop loads them with two 16-byte shared-memory reads and does no index arithmetic.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "lowbit/status.h"

namespace lowbit {

// Bytes of the prepacked weights of an [n, k] NVFP4 matrix (n rounded up to 128, k to 128).
size_t nvfp4_prepacked_bytes(int64_t n, int64_t k);

struct Nvfp4PrepackArgs {
  int64_t n = 0;                 // rows (output features), >= 1
  int64_t k = 0;                 // multiple of 32
  const void* packed = nullptr;  // E2M1 [n, k / 2] bytes, element 2j in the low nibble of byte j
  const void* scales = nullptr;  // E4M3 scales: [n, k / 16] row-major, or the 128x4 swizzled layout
  bool scales_swizzled = false;  // true: cuBLASLt / CUTLASS 128x4-atom layout (rows padded to 128, k/16 to 4)
  void* out = nullptr;           // nvfp4_prepacked_bytes(n, k) bytes, 16-byte aligned
  size_t out_bytes = 0;
};

// Stream-ordered; allocates nothing. Run once per weight tensor (at load time).
Status nvfp4_prepack_weights(const Nvfp4PrepackArgs& args, cudaStream_t stream);

struct Nvfp4GemmConfig {
  int block_tokens = 16;  // tokens per tile (the WGMMA N): 16, 32, 64, 128 or 256 (dense only)
  int splits = 1;         // split-K factor (deterministic fix-up through the workspace)
  std::string reason;     // why the chooser picked it ("forced" when parsed)
  std::string to_string() const;
};

// "tokens=16,splits=4"
Status parse_nvfp4_config(const std::string& text, Nvfp4GemmConfig* out);
// Picks the token tile from M and the split from the SM count (asks the device).
Status choose_nvfp4_config(int64_t m, int64_t n, int64_t k, Nvfp4GemmConfig* out);

struct Nvfp4GemmArgs {
  int64_t m = 0;  // tokens, >= 1
  int64_t n = 0;  // output features, multiple of 16
  int64_t k = 0;  // multiple of 32
  // Activations: exactly one of
  const void* a_bf16 = nullptr;    // BF16 [m, k], 16-byte aligned (W4A16), or
  const void* a_packed = nullptr;  // NVFP4 [m, k / 2], 16-byte aligned, with
  const void* a_scales = nullptr;  //   E4M3 [m, k / 16] row-major scales
  float a_global_scale = 1.0f;     // finite, > 0 (ignored for BF16 activations)
  const void* b_prepacked = nullptr;  // from nvfp4_prepack_weights for this (n, k)
  float b_global_scale = 1.0f;        // finite, > 0
  // (The kernel applies a_global_scale * b_global_scale * 256 as one FP32 factor, which must
  // be a normal FP32 value: scales whose product leaves that range are refused.)
  void* d = nullptr;                  // BF16 [m, n], 16-byte aligned
  // Caller-owned scratch: split-K partials and tile counters, and the BF16 copy of NVFP4
  // activations (nvfp4_gemm_workspace_size), laid out as Fp8GemmArgs::workspace (counters in the
  // first 16 KiB, shareable with the other dense GEMMs). Zero-fill once before first use
  // (workspace_init); every call leaves the counters at zero again. Concurrent calls need
  // separate workspaces.
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

size_t nvfp4_gemm_workspace_size(int64_t m, int64_t n, int64_t k, bool nvfp4_activations,
                                 const Nvfp4GemmConfig& config);

// Stream-ordered; no allocation, no synchronization. Without a config the chooser picks one
// whose workspace fits.
Status nvfp4_gemm(const Nvfp4GemmArgs& args, cudaStream_t stream, const Nvfp4GemmConfig* config = nullptr);

// ---------------------------------------------------------------- grouped
// One problem of a grouped NVFP4 GEMM: D_g[m, n] = g_a * g_b * A_g[m, k] . W_g[n, k]^T. An array
// of these lives in device memory, so a captured CUDA graph can be replayed after the caller
// rewrites sizes and pointers on the device.
struct Nvfp4GroupedProblem {
  int32_t m;  // tokens; 0 = empty group (costs nothing, its pointers are not read)
  int32_t n;  // multiple of 16, below 2^30
  int32_t k;  // multiple of 32, below 2^30
  int32_t reserved;
  const void* a;            // BF16 [m, k] (W4A16 call) or NVFP4 [m, k / 2] (NVFP4 call), 16-byte aligned
  const void* a_scales;     // NVFP4 call: E4M3 [m, k / 16] row-major; unused otherwise
  const void* b_prepacked;  // nvfp4_prepack_weights of this group's [n, k] weights, 16-byte aligned
  void* d;                  // BF16 [m, n], 16-byte aligned
  float a_global_scale;     // NVFP4 call: finite, > 0
  float b_global_scale;     // finite, > 0; a_global_scale * b_global_scale * 256 a normal FP32 value
};

struct Nvfp4GroupedArgs {
  const Nvfp4GroupedProblem* problems = nullptr;  // device memory, `groups` descriptors
  int groups = 0;                                 // >= 1
  bool nvfp4_activations = false;                 // every group's A is NVFP4 (else BF16)
  // NVFP4 call: the BF16 copy of all groups' activations is staged in the workspace; this bounds
  // sum over groups of m * k. A call whose groups need more computes nothing and reports it.
  // At most kNvfp4MaxStagedElements (2^40).
  int64_t max_activation_elements = 0;
  // Typical tokens per group, for the chooser's token tile (the sizes live on the device);
  // 0 = unknown (128-token tiles).
  int64_t expected_m = 0;
  // The call's first kernel launches with programmatic dependent launch: it may be resident
  // under the stream's previous kernel and starts as soon as that one completes (it touches no
  // memory before). false: a plain launch, after the previous kernel. The second kernel always
  // follows the first with PDL.
  bool pdl_first = true;
  // Caller-owned, 256-byte aligned: status block, tile offsets, per-group tensor maps, staged
  // activations (nvfp4_grouped_workspace_size). No initialization needed; calls that may run
  // concurrently need separate workspaces. (It overwrites a dense GEMM workspace's split-K counters:
  // zero-fill such a buffer again before a dense call uses it.)
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

// The largest staging capacity a grouped call accepts (2 TiB of BF16): far above any device's
// memory, and small enough that the workspace size cannot overflow.
constexpr int64_t kNvfp4MaxStagedElements = int64_t{1} << 40;

// 0 for an invalid request (max_groups <= 0, or max_activation_elements outside
// [0, kNvfp4MaxStagedElements]).
size_t nvfp4_grouped_workspace_size(int max_groups, int64_t max_activation_elements);

// Picks the token tile for a grouped call (no K split: the groups' tiles fill the SMs).
Status choose_nvfp4_grouped_config(const Nvfp4GroupedArgs& args, Nvfp4GemmConfig* out);

// One preparation launch (validates the descriptors, lays out the tiles, patches the groups'
// activation tensor maps and, for an NVFP4 call, dequantizes the activations into the
// workspace), then one persistent GEMM launch over the tiles of every group; all on `stream`,
// no host synchronization, capturable in a graph. A group that breaks a rule (negative m; n not
// a positive multiple of 16, or k of 32, below 2^30; a null or misaligned pointer in a non-empty
// group; a global scale that is not finite and > 0) is skipped -- its D is not written -- and
// recorded in the workspace's status block (nvfp4_grouped_check_status). Host-side checks:
// groups >= 1; problems and workspace non-null, aligned (the descriptor's alignment; 256 bytes)
// and readable by the device (pageable host memory is refused); workspace large enough;
// max_activation_elements >= 32 for NVFP4 activations; config valid (splits = 1).
Status nvfp4_grouped_gemm(const Nvfp4GroupedArgs& args, cudaStream_t stream, const Nvfp4GemmConfig* config = nullptr);

// The same rules, applied to descriptors the caller holds on the host; names the first bad group.
Status nvfp4_grouped_validate(const Nvfp4GroupedProblem* host_problems, int groups, bool nvfp4_activations);

// Reads the status block the last nvfp4_grouped_gemm on this workspace left: Ok, or everything it
// did not compute -- how many groups were invalid, the first 12 of them and why, and a reason that
// stopped the whole call (too many tiles, too little staging room). Synchronizes `stream` (a
// checking aid, not for the hot path).
Status nvfp4_grouped_check_status(const void* workspace, cudaStream_t stream);

}  // namespace lowbit
