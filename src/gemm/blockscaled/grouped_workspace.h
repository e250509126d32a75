// Layout of the grouped GEMM's workspace, shared by the host launcher and the device kernels:
// the status block (gemm/grouped_status.h), the groups' tile offsets and their tensor maps (A, B, D per group).
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>

#include "gemm/grouped_status.h"
#include "lowbit/blockscaled.h"

namespace lowbit::blockscaled {

// Why a group was skipped, or the whole call computed nothing (gemm::GroupedStatus).
enum GroupError : int {
  kGroupOk = 0,
  kGroupNegativeM = 1,
  kGroupBadNK = 2,        // n or k not a positive multiple of 16
  kGroupNullPointer = 3,  // a, b, d, sfa or sfb null in a non-empty group
  kGroupMisaligned = 4,   // a, b, d, sfa not 16-byte aligned, or sfb not 4-byte aligned
  kGroupBadScaleLd = 5,   // sfa_ld < m or not a multiple of 4
  kGroupTooManyTiles = 6, // all groups together have 2^30 tiles or more: nothing is computed
  kGroupTooLarge = 7,     // m, n or k above 2^30 (tile and K-block counts are ints)
  kGroupBadMaskedM = 8,   // masked layout: masked_m[g] outside [0, max_m]
  kGroupBadOffsets = 9,   // contiguous layout: offsets[g], offsets[g + 1] out of order, out of [0, rows],
                          // or a non-empty group's first row not a multiple of 4
};
constexpr int kGroupMaxDim = 1 << 30;

inline const char* group_error_text(int code) {
  switch (code) {
    case kGroupOk: return "ok";
    case kGroupNegativeM: return "m < 0";
    case kGroupBadNK: return "n and k must be positive multiples of 16";
    case kGroupNullPointer: return "a, b, d, sfa and sfb must be non-null in a non-empty group";
    case kGroupMisaligned: return "a, b, d and sfa must be 16-byte aligned, sfb 4-byte aligned";
    case kGroupBadScaleLd: return "sfa_ld must be >= m and a multiple of 4";
    case kGroupTooManyTiles: return "the groups together have 2^30 tiles or more";
    case kGroupTooLarge: return "m, n and k must be at most 2^30";
    case kGroupBadMaskedM: return "masked_m must be in [0, max_m]";
    case kGroupBadOffsets:
      return "offsets must be non-decreasing within [0, rows], a non-empty group starting on a multiple of 4 rows";
  }
  return "unknown";
}

struct GroupedWorkspace {
  gemm::GroupedStatus* status;  // the first 128 bytes
  int* tile_start;   // [groups + 1]
  CUtensorMap* maps; // [groups * 3], 128-byte aligned
  // [groups], after the maps: the descriptors the preparation kernel writes for a layout that has
  // none of its own (masked, contiguous); null in a descriptor-array call's workspace.
  Fp8GroupedProblem* problems;

  static size_t tile_offset_bytes() { return 128; }
  static size_t maps_offset(int max_groups) {
    return (tile_offset_bytes() + (static_cast<size_t>(max_groups) + 1) * sizeof(int) + 127) / 128 * 128;
  }
  static size_t bytes(int max_groups) { return maps_offset(max_groups) + static_cast<size_t>(max_groups) * 3 * 128; }
  // With the descriptors too.
  static size_t bytes_with_problems(int max_groups) {
    return bytes(max_groups) + static_cast<size_t>(max_groups) * sizeof(Fp8GroupedProblem);
  }
  static GroupedWorkspace at(void* base, int max_groups, bool with_problems = false) {
    char* b = static_cast<char*>(base);
    return GroupedWorkspace{reinterpret_cast<gemm::GroupedStatus*>(b), reinterpret_cast<int*>(b + tile_offset_bytes()),
                            reinterpret_cast<CUtensorMap*>(b + maps_offset(max_groups)),
                            with_problems ? reinterpret_cast<Fp8GroupedProblem*>(b + bytes(max_groups)) : nullptr};
  }
};

}  // namespace lowbit::blockscaled
