// The grouped NVFP4 GEMM's work before the GEMM, on the caller's stream and without the host:
// one kernel (grouped_prepare_kernel) validates every descriptor, writes the groups' tile offsets
// (an exclusive prefix sum; invalid and empty groups own none), patches one activation tensor map
// per non-empty group from a host-encoded template and, for an NVFP4 call, dequantizes every
// group's activations exactly into the BF16 staging area.
// A captured graph therefore replays correctly after the caller rewrites the descriptors.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>

#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cub/block/block_scan.cuh>

#include "gemm/core/tile_scheduler.cuh"
#include "gemm/grouped_status.h"
#include "gemm/nvfp4/activations.cuh"
#include "hopper/grid_dependency.cuh"
#include "hopper/tma.cuh"
#include "lowbit/nvfp4.h"

namespace lowbit::nvfp4 {

// Why a group was skipped, or the whole call computed nothing (gemm::GroupedStatus).
enum GroupError : int {
  kGroupOk = 0,
  kGroupNegativeM = 1,
  kGroupBadN = 2,              // not a positive multiple of 16 below 2^30
  kGroupBadK = 3,              // not a positive multiple of 32 below 2^30
  kGroupNullPointer = 4,       // a, b_prepacked, d (and a_scales in an NVFP4 call) in a non-empty group
  kGroupMisaligned = 5,        // a, b_prepacked, d not 16-byte aligned
  kGroupBadGlobalScale = 6,    // not finite and > 0, or their product out of range (nvfp4_global_scales_ok)
  kGroupTooManyTiles = 7,      // all groups together: nothing is computed
  kGroupActivationsTooLarge = 8,  // sum of m * k over the groups exceeds max_activation_elements: nothing is computed
};

inline const char* group_error_text(int code) {
  switch (code) {
    case kGroupOk: return "ok";
    case kGroupNegativeM: return "m < 0";
    case kGroupBadN: return "n must be a positive multiple of 16 below 2^30";
    case kGroupBadK: return "k must be a positive multiple of 32 below 2^30";
    case kGroupNullPointer: return "a, b_prepacked, d (and a_scales for NVFP4 activations) must be non-null in a non-empty group";
    case kGroupMisaligned: return "a, b_prepacked and d must be 16-byte aligned";
    case kGroupBadGlobalScale:
      return "global scales must be finite and > 0, with a_global_scale * b_global_scale * 256 a normal FP32 value";
    case kGroupTooManyTiles: return "the groups together have 2^30 tiles or more";
    case kGroupActivationsTooLarge: return "the groups' activations (sum of m * k) exceed max_activation_elements";
  }
  return "unknown";
}

__host__ __device__ __forceinline__ bool misaligned16(const void* ptr) {
  return reinterpret_cast<uintptr_t>(ptr) % 16 != 0;
}

// The rules for one descriptor, applied on the device here and by nvfp4_grouped_validate.
__host__ __device__ __forceinline__ int check_group(const Nvfp4GroupedProblem& g, bool nvfp4_act) {
  if (g.m < 0) return kGroupNegativeM;
  if (g.m == 0) return kGroupOk;
  // Below 2^30, like the dense call: tile and K-block arithmetic stays in int.
  if (g.n <= 0 || g.n % 16 != 0 || g.n >= (1 << 30)) return kGroupBadN;
  if (g.k <= 0 || g.k % 32 != 0 || g.k >= (1 << 30)) return kGroupBadK;
  if (!g.a || !g.b_prepacked || !g.d || (nvfp4_act && !g.a_scales)) return kGroupNullPointer;
  if (misaligned16(g.a) || misaligned16(g.b_prepacked) || misaligned16(g.d)) return kGroupMisaligned;
  if (!formats::nvfp4_global_scales_ok(nvfp4_act ? g.a_global_scale : 1.0f, g.b_global_scale)) return kGroupBadGlobalScale;
  return kGroupOk;
}

// The workspace: the status block (gemm/grouped_status.h), the tile offsets, the groups' activation maps and the staging
// area, each at a fixed place for (groups, capacity).
struct GroupedWorkspace {
  gemm::GroupedStatus* status;  // the first 128 bytes
  int* tile_start;            // [groups + 1]
  CUtensorMap* maps;          // [groups]
  __nv_bfloat16* staging;     // [capacity] BF16
  long long capacity;         // elements

  static size_t align(size_t x, size_t a) { return (x + a - 1) / a * a; }
  static size_t tiles_offset() { return 128; }
  static size_t maps_offset(int groups) { return align(tiles_offset() + (static_cast<size_t>(groups) + 1) * 4, 128); }
  static size_t staging_offset(int groups) { return align(maps_offset(groups) + static_cast<size_t>(groups) * 128, 256); }
  static size_t bytes(int groups, long long capacity) {
    return staging_offset(groups) + align(static_cast<size_t>(capacity > 0 ? capacity : 0) * 2, 256);
  }
  static GroupedWorkspace at(void* base, int groups, long long capacity) {
    char* b = static_cast<char*>(base);
    return GroupedWorkspace{reinterpret_cast<gemm::GroupedStatus*>(b), reinterpret_cast<int*>(b + tiles_offset()),
                            reinterpret_cast<CUtensorMap*>(b + maps_offset(groups)),
                            reinterpret_cast<__nv_bfloat16*>(b + staging_offset(groups)), capacity};
  }
};

constexpr int kPrepareThreads = 256;

// One kernel before the GEMM. Every CTA scans the descriptors itself (a few loads per group), so
// no CTA waits for another's offsets: CTA 0 writes the tile offsets, the maps and the status, and
// in an NVFP4 call all CTAs dequantize their grid-stride share of the activations at once. (As
// two kernels, the pass waited for a one-CTA scan to complete and searched offsets in global
// memory: 0.4-0.8 us more per call, docs/perf.md W5 v2.)
// Groups are taken 256 at a time; a chunk's staging offsets and operand pointers sit in shared
// memory, where each 16-value block finds its group by binary search.
__global__ void __launch_bounds__(kPrepareThreads)
    grouped_prepare_kernel(const Nvfp4GroupedProblem* problems, int groups, bool nvfp4_act, int tokens,
                           GroupedWorkspace ws, const __grid_constant__ CUtensorMap tmpl) {
  using Scan = cub::BlockScan<long long, kPrepareThreads>;
  __shared__ typename Scan::TempStorage scan_tmp;
  __shared__ gemm::GroupedStatus status;
  __shared__ int warp_counts[kPrepareThreads / 32];
  __shared__ int any_invalid;
  __shared__ long long tile_carry, act_carry;
  __shared__ long long chunk_act_start[kPrepareThreads + 1];
  __shared__ const uint8_t* chunk_packed[kPrepareThreads];
  __shared__ const uint8_t* chunk_scales[kPrepareThreads];
  const bool writer = blockIdx.x == 0;
  // Launched with PDL: resident under the tail of the caller's previous kernel, it touches
  // nothing (the descriptors may be that kernel's output; the workspace may still be read by the
  // previous call's GEMM, which completed before that kernel began) until the wait returns.
  // The GEMM may become resident now; it waits for this grid's completion before reading
  // anything written here.
  hopper::grid_dependency_wait();
  hopper::launch_dependents();
  if (threadIdx.x == 0) {
    status = gemm::GroupedStatus{};
    any_invalid = 0;
    tile_carry = 0;
    act_carry = 0;
  }
  __syncthreads();
  const long long stride = static_cast<long long>(gridDim.x) * kPrepareThreads;
  const long long me = static_cast<long long>(blockIdx.x) * kPrepareThreads + threadIdx.x;
  // Counts are kept in 16-value blocks and saturated one past what the call can hold: a group
  // may need ~2^57 blocks and ~2^50 tiles, and sums of such counts wrapped negative and passed
  // the capacity checks (a crash instead of a report). Past the limit only "too many" matters.
  const long long cap_blocks = ws.capacity / 16;
  const long long max_tiles = static_cast<long long>(gemm::kMaxUnits) + 1;
  for (int base = 0; base < groups; base += kPrepareThreads) {
    const int gi = base + static_cast<int>(threadIdx.x);
    Nvfp4GroupedProblem g{};
    long long tiles = 0, act_blocks = 0;
    int err = kGroupOk;
    if (gi < groups) {
      g = problems[gi];
      err = check_group(g, nvfp4_act);
      if (err != kGroupOk) {
        g.m = 0;
        any_invalid = 1;  // read after the loop, whose barriers order it
      } else if (g.m > 0) {
        tiles = ((static_cast<long long>(g.m) + tokens - 1) / tokens) * ((static_cast<long long>(g.n) + 127) / 128);
        tiles = min(tiles, max_tiles);
        if (nvfp4_act) act_blocks = min(static_cast<long long>(g.m) * g.k / 16, cap_blocks + 1);
      }
    }
    long long tile_off = 0, tile_sum = 0, act_off = 0, act_sum = 0;
    Scan(scan_tmp).ExclusiveSum(tiles, tile_off, tile_sum);
    __syncthreads();  // scan_tmp is reused
    Scan(scan_tmp).ExclusiveSum(act_blocks, act_off, act_sum);
    const long long tile_start = tile_carry + tile_off, act_start = act_carry + act_off;
    // Staged activations are 16-value blocks of 32 bytes, so every group's copy is 16-byte
    // aligned; a map past the staging capacity is never used (the call computes nothing then).
    const bool fits = !nvfp4_act || act_start + act_blocks <= cap_blocks;
    if (writer && gi < groups) {
      ws.tile_start[gi] = static_cast<int>(tile_start < INT_MAX ? tile_start : INT_MAX);
      if (tiles > 0) {
        const void* act = nvfp4_act ? static_cast<const void*>(ws.staging + (fits ? act_start * 16 : 0)) : g.a;
        hopper::tensor_map_patch_2d(ws.maps + gi, tmpl, act, static_cast<uint32_t>(g.k), static_cast<uint32_t>(g.m),
                                    static_cast<uint64_t>(g.k) * 2);
        hopper::tensor_map_release();
      }
    }
    if (nvfp4_act) {
      chunk_act_start[threadIdx.x] = act_start;
      chunk_packed[threadIdx.x] = static_cast<const uint8_t*>(g.a);
      chunk_scales[threadIdx.x] = static_cast<const uint8_t*>(g.a_scales);
      if (threadIdx.x == kPrepareThreads - 1) chunk_act_start[kPrepareThreads] = act_start + act_blocks;
    }
    __syncthreads();  // the chunk's table is written; the carries are read below
    // A chunk that would overflow the staging is not dequantized (nor is anything after it);
    // the status then says nothing was computed.
    const long long lo_block = chunk_act_start[0], hi_block = chunk_act_start[kPrepareThreads];
    if (nvfp4_act && hi_block <= cap_blocks) {
      // This thread's blocks b == me (mod stride) within [lo_block, hi_block).
      const long long first = lo_block + ((me - lo_block) % stride + stride) % stride;
      for (long long b = first; b < hi_block; b += stride) {
        int lo = 0, hi = kPrepareThreads - 1;  // the last chunk entry whose start is <= b
        while (lo < hi) {
          const int mid = (lo + hi + 1) / 2;
          if (chunk_act_start[mid] <= b) lo = mid; else hi = mid - 1;
        }
        const long long group_first = chunk_act_start[lo];
        act_block_to_bf16(chunk_packed[lo], chunk_scales[lo], b - group_first, ws.staging + group_first * 16);
      }
    }
    __syncthreads();  // the chunk's table, scan_tmp and the carries are reused by the next chunk
    if (threadIdx.x == 0) {
      tile_carry = min(tile_carry + tile_sum, max_tiles);
      act_carry = min(act_carry + act_sum, cap_blocks + 1);
    }
    __syncthreads();
  }
  // The invalid groups, counted and the first ones named in order: a second pass, only when there
  // are any (any_invalid is block-uniform here), so a call whose groups are all valid pays nothing.
  if (writer && any_invalid)
    for (int base = 0; base < groups; base += kPrepareThreads) {
      const int gi = base + static_cast<int>(threadIdx.x);
      gemm::record_invalid_groups<kPrepareThreads>(status, warp_counts, gi,
                                                   gi < groups ? check_group(problems[gi], nvfp4_act) : kGroupOk);
    }
  if (writer && threadIdx.x == 0) {
    // More tiles than a launch walks (gemm::kMaxUnits), or more activations than the staging
    // holds: compute nothing rather than part of the problem, and say so beside the invalid
    // groups.
    int nothing = kGroupOk;
    if (tile_carry > gemm::kMaxUnits) nothing = kGroupTooManyTiles;
    else if (act_carry > cap_blocks) nothing = kGroupActivationsTooLarge;
    if (nothing != kGroupOk)
      for (int i = 0; i < groups; ++i) ws.tile_start[i] = 0;
    ws.tile_start[groups] = nothing != kGroupOk ? 0 : static_cast<int>(tile_carry);
    status.call_code = nothing;
    status.groups = groups;
    gemm::store_grouped_status(ws.status, status);
  }
}

}  // namespace lowbit::nvfp4
