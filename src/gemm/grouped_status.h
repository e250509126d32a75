// The status block of a grouped call (block-scaled FP8 and NVFP4): the first 128 bytes of its
// workspace, written by the call's preparation kernel and read by *_check_status. It names
// everything the call did not compute: how many groups were skipped as invalid, the first
// kListed of them (index and reason, in index order), and a reason that stopped the whole call
// (too many tiles, too little staging room) -- then no group was computed, valid ones included.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

namespace lowbit::gemm {

// The most groups one grouped call takes: the preparation kernels walk them 256 at a time in int.
constexpr int kMaxGroups = (1 << 30);

struct GroupedStatus {
  static constexpr int kListed = 12;
  int invalid;     // groups skipped as invalid
  int call_code;   // nonzero: nothing was computed, for this reason
  int groups;      // the call's group count
  int listed;      // min(invalid, kListed)
  int group[kListed];
  int code[kListed];
};
static_assert(sizeof(GroupedStatus) <= 128, "the status block is the workspace's first 128 bytes");

#ifdef __CUDACC__
// Counts the invalid groups of one chunk of kThreads consecutive groups (group base + threadIdx.x,
// `code` 0 for a valid or absent one) and lists the first kListed in index order. Every thread
// of the block calls it, once per chunk; `s` is in shared memory, zeroed before the first chunk.
// The preparation kernels call it in a second pass, only when a group is invalid: in the main
// pass, its barriers and serial loops made every call ~0.45 us longer (docs/perf.md R1).
template <int kThreads>
__device__ __forceinline__ void record_invalid_groups(GroupedStatus& s, int* warp_counts, int group, int code) {
  static_assert(kThreads % 32 == 0 && kThreads / 32 <= 32, "whole warps, at most 32");
  if (!__syncthreads_or(code != 0)) return;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const unsigned bad = __ballot_sync(0xffffffffu, code != 0);
  if (lane == 0) warp_counts[warp] = __popc(bad);
  __syncthreads();
  int rank = s.invalid + __popc(bad & ((1u << lane) - 1u));
  for (int w = 0; w < warp; ++w) rank += warp_counts[w];
  if (code != 0 && rank < GroupedStatus::kListed) {
    s.group[rank] = group;
    s.code[rank] = code;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int total = 0;
    for (int w = 0; w < kThreads / 32; ++w) total += warp_counts[w];
    s.invalid += total;
    s.listed = s.invalid < GroupedStatus::kListed ? s.invalid : GroupedStatus::kListed;
  }
  __syncthreads();
}

// Thread 0 stores the block: the header and only the listed entries (nothing else is read).
__device__ __forceinline__ void store_grouped_status(GroupedStatus* out, const GroupedStatus& s) {
  out->invalid = s.invalid;
  out->call_code = s.call_code;
  out->groups = s.groups;
  out->listed = s.listed;
  for (int i = 0; i < s.listed; ++i) {
    out->group[i] = s.group[i];
    out->code[i] = s.code[i];
  }
}
#endif

// The block as a message ("" when everything was computed): `text` maps a code to its reason.
template <class Text>
std::string grouped_status_text(const GroupedStatus& s, const Text& text) {
  std::string out;
  if (s.call_code != 0)
    out = "nothing was computed (no group, valid or not): " + std::string(text(s.call_code));
  if (s.invalid > 0) {
    if (!out.empty()) out += "; also ";
    out += std::to_string(s.invalid) + (s.invalid == 1 ? " invalid group was" : " invalid groups were") +
           " skipped (not computed):";
    const int listed = s.listed < 0 ? 0 : s.listed > GroupedStatus::kListed ? GroupedStatus::kListed : s.listed;
    for (int i = 0; i < listed; ++i)
      out += std::string(i ? ";" : "") + " group " + std::to_string(s.group[i]) + ": " + text(s.code[i]);
    if (s.invalid > listed) out += "; and " + std::to_string(s.invalid - listed) + " more";
  }
  return out;
}

}  // namespace lowbit::gemm
