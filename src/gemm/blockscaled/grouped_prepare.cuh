// The grouped GEMM's preparation launch (one CTA, on the caller's stream before the GEMM): reads
// (or, for the masked layout, builds) every group descriptor and validates it on the device,
// writes the unit offsets of the groups (an exclusive prefix sum of cluster tiles; invalid and
// empty groups own none) and patches one set of tensor maps (A, B, D) per non-empty group from
// host-encoded templates. Nothing here needs the host, so a captured graph replays correctly
// after the caller rewrites the descriptors (or the masked counts).
#pragma once

#include <cuda.h>

#include <climits>
#include <cstdint>
#include <cub/block/block_scan.cuh>

#include "gemm/blockscaled/grouped_workspace.h"
#include "gemm/core/tile_scheduler.cuh"
#include "gemm/grouped_status.h"
#include "hopper/tma.cuh"
#include "lowbit/blockscaled.h"

namespace lowbit::blockscaled {

constexpr int kPrepareThreads = 256;

__host__ __device__ __forceinline__ bool misaligned16(const void* ptr) {
  return reinterpret_cast<uintptr_t>(ptr) % 16 != 0;
}

// The rules for one group descriptor, applied on the device here and by fp8_grouped_validate
// on the host; returns a GroupError code.
__host__ __device__ __forceinline__ int check_group(const Fp8GroupedProblem& g) {
  if (g.m < 0) return kGroupNegativeM;
  if (g.m == 0) return kGroupOk;
  // Larger sizes would overflow the int tile and K-block counts (a negative count computes
  // nothing, or leaves a consumer waiting for a stage that is never loaded).
  if (g.m > kGroupMaxDim || g.n > kGroupMaxDim || g.k > kGroupMaxDim) return kGroupTooLarge;
  if (g.n <= 0 || g.n % 16 != 0 || g.k <= 0 || g.k % 16 != 0) return kGroupBadNK;
  if (!g.a || !g.b || !g.d || !g.sfa || !g.sfb) return kGroupNullPointer;
  if (misaligned16(g.a) || misaligned16(g.b) || misaligned16(g.d) || misaligned16(g.sfa) ||
      reinterpret_cast<uintptr_t>(g.sfb) % 4 != 0)
    return kGroupMisaligned;
  if (g.sfa_ld < g.m || g.sfa_ld % 4 != 0) return kGroupBadScaleLd;
  return kGroupOk;
}

// Where the groups' descriptors come from. The caller's array (fp8_grouped_gemm):
struct DescriptorArray {
  const Fp8GroupedProblem* problems;
  static constexpr bool kWritesDescriptors = false;
  __device__ __forceinline__ Fp8GroupedProblem at(int g) const { return problems[g]; }
  __device__ __forceinline__ int check(const Fp8GroupedProblem& d) const { return check_group(d); }
};
// ... or built from the masked layout (fp8_grouped_gemm_masked): group g's slabs at g times
// their strides, masked_m[g] valid rows. The host checked the shared pointers, strides and sizes
// once; only the counts are checked here. The kernel writes these descriptors into the workspace,
// where the GEMM reads them.
struct MaskedLayout {
  const int* masked_m;
  int max_m, n, k;
  const uint8_t* a;
  const uint8_t* b;
  uint8_t* d;
  const float* sfa;
  const float* sfb;
  int64_t sfa_ld;
  int out_bytes;
  static constexpr bool kWritesDescriptors = true;
  __device__ __forceinline__ Fp8GroupedProblem at(int g) const {
    const int64_t kb = (k + 127) / 128, nb = (n + 127) / 128;
    const int m = masked_m[g];
    return Fp8GroupedProblem{m, n, k, 0, a + static_cast<int64_t>(g) * max_m * k, b + static_cast<int64_t>(g) * n * k,
                             d + static_cast<int64_t>(g) * max_m * n * out_bytes, sfa + g * kb * sfa_ld,
                             sfb + g * nb * kb, sfa_ld};
  }
  __device__ __forceinline__ int check(const Fp8GroupedProblem& d) const {
    return d.m < 0 || d.m > max_m ? kGroupBadMaskedM : kGroupOk;
  }
};

// ... or built from the contiguous layout (fp8_grouped_gemm_contiguous): group g's rows from
// offsets[g] to offsets[g + 1] of the shared A, D and A scales, its own B slab. The host checked the
// shared pointers, strides and sizes once; only the offsets are checked here.
struct ContiguousLayout {
  const int* offsets;
  int64_t rows;
  int n, k;
  const uint8_t* a;
  const uint8_t* b;
  uint8_t* d;
  const float* sfa;
  const float* sfb;
  int64_t sfa_ld;
  int out_bytes;
  static constexpr bool kWritesDescriptors = true;
  // A group whose offsets break the rules gets m = -1 (check() names it; nothing reads its
  // pointers, left at the slabs' starts).
  __device__ __forceinline__ Fp8GroupedProblem at(int g) const {
    const int64_t kb = (k + 127) / 128, nb = (n + 127) / 128;
    const int64_t first = offsets[g], last = offsets[g + 1];
    const bool ok = first >= 0 && last >= first && last <= rows && (last == first || first % 4 == 0);
    const int64_t row = ok ? first : 0;
    return Fp8GroupedProblem{ok ? static_cast<int32_t>(last - first) : -1, n, k, 0, a + row * k,
                             b + static_cast<int64_t>(g) * n * k, d + row * n * out_bytes, sfa + row,
                             sfb + g * nb * kb, sfa_ld};
  }
  __device__ __forceinline__ int check(const Fp8GroupedProblem& d) const {
    return d.m < 0 ? kGroupBadOffsets : kGroupOk;
  }
};

template <class Source>
__global__ void __launch_bounds__(kPrepareThreads)
    grouped_prepare_kernel(const Source src, int groups, GroupedWorkspace ws, int out_bytes, int cluster_m,
                           int block_n,
                           const __grid_constant__ CUtensorMap tmpl_a, const __grid_constant__ CUtensorMap tmpl_b,
                           const __grid_constant__ CUtensorMap tmpl_d) {
  using Scan = cub::BlockScan<long long, kPrepareThreads>;
  __shared__ typename Scan::TempStorage scan_tmp;
  __shared__ gemm::GroupedStatus status;
  __shared__ int warp_counts[kPrepareThreads / 32];
  __shared__ int any_invalid;
  __shared__ long long carry;
  if (threadIdx.x == 0) {
    status = gemm::GroupedStatus{};
    carry = 0;
    any_invalid = 0;
  }
  __syncthreads();
  for (int base = 0; base < groups; base += kPrepareThreads) {
    const int gi = base + static_cast<int>(threadIdx.x);
    Fp8GroupedProblem g{};
    int err = kGroupOk;
    long long tiles = 0;
    if (gi < groups) {
      g = src.at(gi);
      err = src.check(g);
      if constexpr (Source::kWritesDescriptors) ws.problems[gi] = g;
      // Units: one tile per CTA of a cluster (cluster_m vertically adjacent tiles share B).
      if (err == kGroupOk)
        tiles = static_cast<long long>((g.m + 128 * cluster_m - 1) / (128 * cluster_m)) * ((g.n + block_n - 1) / block_n);
      else
        any_invalid = 1;  // read after the loop, whose barriers order it
    }
    long long offset = 0, chunk_total = 0;
    Scan(scan_tmp).ExclusiveSum(tiles, offset, chunk_total);
    const long long start = carry + offset;
    if (gi < groups) ws.tile_start[gi] = static_cast<int>(start < INT_MAX ? start : INT_MAX);
    if (gi < groups && tiles > 0) {
      CUtensorMap* maps = ws.maps + 3 * static_cast<int64_t>(gi);
      hopper::tensor_map_patch_2d(maps + 0, tmpl_a, g.a, static_cast<uint32_t>(g.k), static_cast<uint32_t>(g.m),
                                  static_cast<uint64_t>(g.k));
      hopper::tensor_map_patch_2d(maps + 1, tmpl_b, g.b, static_cast<uint32_t>(g.k), static_cast<uint32_t>(g.n),
                                  static_cast<uint64_t>(g.k));
      hopper::tensor_map_patch_2d(maps + 2, tmpl_d, g.d, static_cast<uint32_t>(g.n), static_cast<uint32_t>(g.m),
                                  static_cast<uint64_t>(g.n) * out_bytes);
      hopper::tensor_map_release();
    }
    __syncthreads();  // scan_tmp and carry are reused by the next chunk
    if (threadIdx.x == 0) carry += chunk_total;
    __syncthreads();
  }
  // The invalid groups, counted and the first ones named in order: a second pass, only when there
  // are any (any_invalid is block-uniform here), so a call whose groups are all valid pays nothing.
  if (any_invalid)
    for (int base = 0; base < groups; base += kPrepareThreads) {
      const int gi = base + static_cast<int>(threadIdx.x);
      gemm::record_invalid_groups<kPrepareThreads>(status, warp_counts, gi, gi < groups ? src.check(src.at(gi)) : kGroupOk);
    }
  if (threadIdx.x == 0) {
    // More tiles than a launch walks (gemm::kMaxUnits): compute nothing rather than part of
    // the problem, and say so beside the invalid groups.
    const bool overflow = carry > gemm::kMaxUnits;
    ws.tile_start[groups] = overflow ? 0 : static_cast<int>(carry);
    if (overflow)
      for (int i = 0; i < groups; ++i) ws.tile_start[i] = 0;
    status.call_code = overflow ? kGroupTooManyTiles : kGroupOk;
    status.groups = groups;
    gemm::store_grouped_status(ws.status, status);
  }
}

}  // namespace lowbit::blockscaled
