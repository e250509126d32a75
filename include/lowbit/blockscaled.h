// Block-scaled FP8 (E4M3) GEMM on Hopper, dense and grouped -- the DeepSeek-V3 recipe:
//   D[m][n] = sum over K blocks kb of  sfa(m, kb) * sfb(n / 128, kb) * sum_{k in kb} A[m][k] * B[n][k]
// A [M,K] and B [N,K] are E4M3, row-major and K-major; D [M,N] is row-major BF16 or FP32.
// A has one FP32 scale per row per 128-wide K block ("1x128", per token), B one per 128 x 128
// block. Each K block's product is accumulated by the tensor cores, scaled in FP32 and added to
// an FP32 accumulator, so precision matches DeepGEMM's.
//
// Scale layouts (kblocks = ceil(K / 128), nblocks = ceil(N / 128)):
//   sfa(m, kb) = sfa[kb * sfa_ld + m]     K-block-major, sfa_ld >= M and a multiple of 4
//                                         (each K block's scales are 16-byte aligned rows)
//   sfb(nb, kb) = sfb[nb * kblocks + kb]  row-major [nblocks, kblocks]
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "lowbit/gemm.h"
#include "lowbit/status.h"

namespace lowbit {

struct Fp8BlockScaledArgs {
  int64_t m = 0;  // >= 1
  int64_t n = 0;  // multiple of 16
  int64_t k = 0;  // multiple of 16
  const void* a = nullptr;  // E4M3 [m, k], 16-byte aligned
  const void* b = nullptr;  // E4M3 [n, k], 16-byte aligned
  void* d = nullptr;        // [m, n] of out_type, 16-byte aligned
  const float* sfa = nullptr;  // [kblocks, sfa_ld], 16-byte aligned
  int64_t sfa_ld = 0;          // >= m, multiple of 4
  const float* sfb = nullptr;  // [nblocks, kblocks], 4-byte aligned
  OutType out_type = OutType::kBF16;
  // Caller-owned scratch for split-K (fp8_blockscaled_workspace_size says how much; 0 bytes: no
  // split-K), zero-filled once before its first use (workspace_init), left zeroed by every call:
  // the same contract as Fp8GemmArgs::workspace, and one buffer can serve both.
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

// Launch knobs of the block-scaled kernels, printable and forceable from lowbit-bench.
// Both run on the FP8 GEMM core: the dense GEMM with its tiles, split-K and cost model, the grouped
// one walking the groups' tiles. A forced dense config overrides what it sets (non-zero fields;
// group as given).
struct BlockScaledConfig {
  int grid = 0;          // persistent CTAs; 0 = auto (dense: the chooser's; grouped: the SM count)
  int raster_group = 8;  // tiles walked in bands of this many M-blocks for L2 reuse
  // CTAs per cluster along M: 0 (auto) or 1. The block-scaled kernels run single CTAs (multicast
  // pairs ran no faster, docs/perf.md block-scaled "pairs level with single CTAs on the grouped
  // sets"); 2 is refused.
  int cluster = 0;
  // Tile columns: dense 64, 128, 144, 192 or 256 (128 rows) and 32, 48, 64 or 80 (64 rows), grouped
  // 128 or 256 (gemm/blockscaled/variants.def); 0 = auto (dense: the cost model; grouped: 256, since
  // the host does not see the group sizes).
  int block_n = 0;
  int block_m = 0;  // dense tile rows: 128, or 64 (with block_n = 32, 48, 64 or 80); 0 = auto
  int splits = 0;   // dense split-K factor (needs the workspace); 0 = auto
  // 1 runs each unit's epilogue under the next unit's first MMAs, 0 not; -1 = auto (wherever
  // compiled). Dense: needs splits = 1 and a tile it is compiled for (BF16 out). Grouped: compiled
  // for BF16 out (with it only), FP32 runs without.
  int overlap = -1;
  // Dense split K: 1 reduces a tile's splits within a cluster of that many CTAs, through
  // distributed shared memory (no workspace; compiled for some tiles with BF16 out, up to a split
  // count, gemm/blockscaled/variants.def), 0 through the workspace, -1 = auto (within a cluster
  // wherever compiled).
  int cluster_reduce = -1;
  std::string to_string() const;
};
// Parses "grid=132,group=8,cluster=1,bn=256,bm=64,splits=4,overlap=1,creduce=1" (any subset);
// unknown keys are an error.
Status parse_blockscaled_config(const std::string& text, BlockScaledConfig* out);

// What a call with `config` runs and why (dense: M x N x K on `sm_count` SMs with as much
// workspace as it wants, e.g. "bm=128,bn=64,splits=4,group=8,grid=132 (cost model ...)";
// grouped: M, N and K unused, e.g. "bn=256,overlap=1 (grouped ...)"). lowbit-bench prints it.
std::string explain_blockscaled_choice(const BlockScaledConfig& config, bool grouped, int64_t m, int64_t n,
                                      int sm_count, int64_t k = 0);

// Split-K workspace a dense call needs: for `config` (its splits), or, without one, the most the
// chooser would use for this shape on the current device (saturates at SIZE_MAX, never wraps).
size_t fp8_blockscaled_workspace_size(int64_t m, int64_t n, int64_t k, const BlockScaledConfig* config = nullptr);

// Dense block-scaled GEMM on `stream`: no allocation, no synchronization. Without a forced config
// it picks the best tile and split the workspace can hold (memoized per device, shape, output
// type and workspace size).
Status fp8_blockscaled_gemm(const Fp8BlockScaledArgs& args, cudaStream_t stream,
                            const BlockScaledConfig* config = nullptr);

// ---------------------------------------------------------------- grouped
// One problem of a grouped GEMM. An array of these lives in device memory, so a captured CUDA
// graph can be replayed after the caller rewrites sizes and pointers on the device.
struct Fp8GroupedProblem {
  int32_t m;  // rows of A and D; 0 = empty group (costs nothing, its pointers are not read)
  int32_t n;  // multiple of 16
  int32_t k;  // multiple of 16
  int32_t reserved;
  const void* a;  // E4M3 [m, k]
  const void* b;  // E4M3 [n, k]
  void* d;        // [m, n] of the call's out_type
  const float* sfa;  // [ceil(k/128), sfa_ld], 16-byte aligned
  const float* sfb;  // [ceil(n/128), ceil(k/128)]
  int64_t sfa_ld;    // >= m, multiple of 4
};

// Workspace of a grouped call with up to `max_groups` groups: the per-group tensor maps (built
// on the device from the descriptors by a preparation kernel in the same stream), the tile
// offsets and a status block. Caller-owned, 128-byte aligned; no initialization needed; calls
// that may run concurrently need separate workspaces. (It overwrites a dense GEMM workspace's split-K
// counters: zero-fill such a buffer again before a dense call uses it.)
size_t fp8_grouped_workspace_size(int max_groups);

// Grouped block-scaled GEMM: one persistent launch over the tiles of every group (after a small
// preparation launch), all on `stream`, no host synchronization -- capturable in a graph.
// `problems` points to `groups` descriptors in device memory; they are validated on the device:
// a group that breaks a rule (negative m, n or k not a positive multiple of 16, m, n or k above
// 2^30, a null or misaligned pointer in a non-empty group, sfa_ld too small) is skipped -- its D
// is not written -- and recorded in the workspace's status block (fp8_grouped_check_status reads
// it).
// Host-side checks: groups >= 1; problems and workspace non-null, aligned (the descriptor's
// alignment; 128 bytes) and readable by the device (pageable host memory is refused); workspace
// large enough.
Status fp8_grouped_gemm(const Fp8GroupedProblem* problems, int groups, OutType out_type, void* workspace,
                        size_t workspace_bytes, cudaStream_t stream, const BlockScaledConfig* config = nullptr);

// Host-side validation of descriptors the caller holds on the host (the same rules the device
// applies), with a message naming the first bad group.
Status fp8_grouped_validate(const Fp8GroupedProblem* host_problems, int groups);

// ---------------------------------------------------------------- grouped, masked layout
// DeepGEMM's masked layout (m_grouped_fp8_gemm_nt_masked; MoE decode): G groups of the same N and K,
// each with room for max_m rows of which the first masked_m[g] are valid. The counts live in
// device memory, so a captured graph replays with whatever the routing wrote there.
struct Fp8MaskedGroupedArgs {
  int groups = 0;   // >= 1
  int max_m = 0;    // rows each group has room for, >= 1
  int64_t n = 0;    // multiple of 16
  int64_t k = 0;    // multiple of 16
  const void* a = nullptr;      // E4M3 [groups, max_m, k], 16-byte aligned
  const void* b = nullptr;      // E4M3 [groups, n, k], 16-byte aligned
  void* d = nullptr;            // [groups, max_m, n] of out_type, 16-byte aligned; rows at and past
                                // masked_m[g] are not written
  const float* sfa = nullptr;   // [groups, kblocks, sfa_ld], 16-byte aligned (each group's scales as
                                // fp8_blockscaled_gemm's, one after the other)
  int64_t sfa_ld = 0;           // >= max_m, multiple of 4
  const float* sfb = nullptr;   // [groups, nblocks, kblocks], 4-byte aligned
  const int* masked_m = nullptr;  // [groups] on the device: group g's valid rows, in [0, max_m]
  OutType out_type = OutType::kBF16;  // BF16 or FP32
  // fp8_grouped_masked_workspace_size(groups) bytes, 128-byte aligned; no initialization needed;
  // calls that may run concurrently need separate workspaces.
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

size_t fp8_grouped_masked_workspace_size(int groups);

// The masked grouped GEMM: the descriptor-array GEMM's two launches (the preparation kernel builds
// each group's descriptor and tensor maps from masked_m on the device), stream-ordered, no host
// synchronization, capturable. A group whose masked_m[g] lies outside [0, max_m] is skipped and
// recorded in the status block (fp8_grouped_check_status reads it, as for fp8_grouped_gemm).
Status fp8_grouped_gemm_masked(const Fp8MaskedGroupedArgs& args, cudaStream_t stream,
                               const BlockScaledConfig* config = nullptr);

// ---------------------------------------------------------------- grouped, contiguous layout
// DeepGEMM's contiguous layout (m_grouped_fp8_gemm_nt_contiguous; MoE prefill): the rows of every
// group one after the other in one A and one D, each group with its own B. Group g owns rows
// [offsets[g], offsets[g + 1]): any sizes (DeepGEMM pads every group to 128 rows), as long as each
// non-empty group starts on a multiple of 4 rows (the A scales are copied 16 bytes at a time). The
// offsets live in device memory, so a captured graph replays with new group sizes.
struct Fp8ContiguousGroupedArgs {
  int groups = 0;   // >= 1
  int64_t rows = 0; // rows of A and D, >= 1
  int64_t n = 0;    // multiple of 16
  int64_t k = 0;    // multiple of 16
  const void* a = nullptr;      // E4M3 [rows, k], 16-byte aligned
  const void* b = nullptr;      // E4M3 [groups, n, k], 16-byte aligned
  void* d = nullptr;            // [rows, n] of out_type, 16-byte aligned; rows no group owns are not written
  const float* sfa = nullptr;   // [kblocks, sfa_ld] over all rows (fp8_blockscaled_gemm's layout), 16-byte aligned
  int64_t sfa_ld = 0;           // >= rows, multiple of 4
  const float* sfb = nullptr;   // [groups, nblocks, kblocks], 4-byte aligned
  // [groups + 1] on the device: non-decreasing, offsets[0] >= 0, offsets[groups] <= rows, and a
  // multiple of 4 wherever a non-empty group starts. A group that breaks this is skipped and named
  // in the status block.
  const int* offsets = nullptr;
  OutType out_type = OutType::kBF16;  // BF16 or FP32
  // fp8_grouped_contiguous_workspace_size(groups) bytes, 128-byte aligned; no initialization needed;
  // calls that may run concurrently need separate workspaces.
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

size_t fp8_grouped_contiguous_workspace_size(int groups);

// The contiguous grouped GEMM: the descriptor-array GEMM's two launches (the preparation kernel
// builds each group's descriptor and tensor maps from the offsets on the device), stream-ordered,
// no host synchronization, capturable.
Status fp8_grouped_gemm_contiguous(const Fp8ContiguousGroupedArgs& args, cudaStream_t stream,
                                   const BlockScaledConfig* config = nullptr);

// Reads the status block the last fp8_grouped_gemm on this workspace left: Ok, or everything it
// did not compute -- how many groups were invalid, the first 12 of them and why, and a reason that
// stopped the whole call (2^30 tiles or more). Synchronizes `stream` (a checking aid, not for the hot
// path).
Status fp8_grouped_check_status(const void* workspace, cudaStream_t stream);

}  // namespace lowbit
