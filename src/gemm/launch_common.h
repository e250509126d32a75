// Host pieces the persistent GEMM launchers share: the shape rules every one of them checks, the
// split-K workspace layout (gemm/split_k.cuh is the device fix-up) -- one arrival counter per tile
// (padded to 256 bytes), then `splits` FP32 partial tiles per tile -- and the launch tail.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdio>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "lowbit/status.h"

namespace lowbit::gemm {

// M >= 1, N a positive multiple of 16 (16-byte rows for TMA), K a positive multiple of
// `k_multiple`, all below 2^31 with room for a tile of padding. `who` prefixes the message.
inline Status validate_gemm_shape(const char* who, int64_t m, int64_t n, int64_t k, int k_multiple) {
  const std::string w(who);
  if (m <= 0) return Status::Invalid(w + ": M must be >= 1 (got " + std::to_string(m) + ")");
  if (n <= 0 || n % 16 != 0)
    return Status::Invalid(w + ": N must be a positive multiple of 16 (got " + std::to_string(n) + ")");
  if (k <= 0 || k % k_multiple != 0)
    return Status::Invalid(w + ": K must be a positive multiple of " + std::to_string(k_multiple) + " (got " +
                           std::to_string(k) + ")");
  if (m > INT_MAX - 256 || n > INT_MAX - 256 || k > INT_MAX - 256)
    return Status::Invalid(w + ": M, N and K must each be at most 2^31 - 257 (a tile of padding below 2^31; got " +
                           std::to_string(m) + " x " + std::to_string(n) + " x " + std::to_string(k) + ")");
  return Status::Ok();
}

// Split-K tile counters live in a fixed region at the start of a workspace (one int per tile, up
// to kSplitKMaxTiles tiles) that nothing else ever writes. Every split call leaves its counters at
// zero, so calls of any shape and kind can share one workspace after a single zero-fill; partials
// (and NVFP4's staged activations) start after the region. When the counters sat in front of
// partials sized per call, a split call with more tiles read an earlier call's partials (or
// staged activations) as its counters, and its fix-up skipped or raced tiles.
constexpr size_t kSplitKCounterBytes = 16384;
constexpr int64_t kSplitKMaxTiles = static_cast<int64_t>(kSplitKCounterBytes / sizeof(int));

inline size_t split_k_workspace_bytes(size_t tiles, int splits, int block_m, int block_n) {
  if (splits <= 1) return 0;
  return kSplitKCounterBytes + tiles * static_cast<size_t>(splits) * block_m * block_n * sizeof(float);
}

// A split call's tiles must fit the counter region.
inline Status check_split_tiles(const char* who, int64_t tiles, int splits) {
  if (splits > 1 && tiles > kSplitKMaxTiles)
    return Status::Invalid(std::string(who) + ": split K covers at most " + std::to_string(kSplitKMaxTiles) +
                           " output tiles (got " + std::to_string(tiles) + "); use splits=1 or a wider tile");
  return Status::Ok();
}

// Points the kernel parameters' split-K buffers into the workspace (nothing without a split).
template <class Params>
void bind_split_k_workspace(Params& p, void* workspace) {
  if (p.sched.splits <= 1) return;
  p.tile_counters = static_cast<int*>(workspace);
  p.partials = reinterpret_cast<float*>(static_cast<char*>(workspace) + kSplitKCounterBytes);
}

// After a launch: the LOWBIT_LOG line ("[lowbit] <describe()>: grid G (U units)") and the Status.
// `describe` (a callable returning std::string) runs only when logging or on an error, so a
// launch builds no strings.
template <class Describe>
Status launch_status(cudaError_t e, const Describe& describe, int launched, int units) {
  static const bool log_launches = std::getenv("LOWBIT_LOG") != nullptr;
  if (log_launches) std::fprintf(stderr, "[lowbit] %s: grid %d (%d units)\n", describe().c_str(), launched, units);
  if (e != cudaSuccess)
    return Status::Error(StatusCode::kCudaError, describe() + " launch: " + cudaGetErrorString(e));
  return Status::Ok();
}

// A failed launch or copy as a Status: "<what>: <CUDA's message>".
inline Status cuda_error(const std::string& what, cudaError_t e) {
  return Status::Error(StatusCode::kCudaError, what + ": " + cudaGetErrorString(e));
}

// A grouped call's status word -- {error code, first bad group or -1} at the start of its
// workspace, written by its preparation kernel -- read back as a Status: Ok when the code is 0,
// else "<call>: group g: <text(code)>". `reader` names the checking function in its own errors.
// Synchronizes `stream` (a checking aid, not for the hot path).
template <class Text>
Status read_grouped_status(const void* workspace, cudaStream_t stream, const char* reader, const char* call,
                           const Text& text) {
  if (!workspace) return Status::Invalid(std::string(reader) + ": null workspace");
  int host[2] = {0, -1};
  cudaError_t e = cudaMemcpyAsync(host, workspace, sizeof(host), cudaMemcpyDeviceToHost, stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
  if (e != cudaSuccess) return cuda_error(reader, e);
  if (host[0] == 0) return Status::Ok();
  return Status::Invalid(std::string(call) + ": " +
                         (host[1] >= 0 ? "group " + std::to_string(host[1]) + ": " : std::string()) + text(host[0]));
}

}  // namespace lowbit::gemm
