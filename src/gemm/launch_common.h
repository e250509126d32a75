// Host pieces the launchers share: the shape rules every GEMM checks, the split-K workspace
// layout (gemm/split_k.cuh is the device fix-up) -- a fixed region of arrival counters, then
// `splits` FP32 partial tiles per tile -- the launch tail, and the checked read-backs.
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
  // The tile count (at least 64 x 64 per tile) then stays below the 2^30 units a launch walks
  // (kMaxUnits); no memory holds an output this large anyway.
  if (m * n > (int64_t{1} << 40))
    return Status::Invalid(w + ": M x N must be at most 2^40 (got " + std::to_string(m) + " x " + std::to_string(n) +
                           ")");
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

// Copies `bytes` of device memory at `src` to the host and waits for `stream`: the checking
// helpers' read-back. Refused while `stream` is capturing a graph, where the synchronous copy
// would invalidate the caller's capture. `who` prefixes the errors.
inline Status read_back(const char* who, const void* src, void* dst, size_t bytes, cudaStream_t stream) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  cudaError_t e = cudaStreamIsCapturing(stream, &capture);
  if (e != cudaSuccess) return cuda_error(who, e);
  if (capture != cudaStreamCaptureStatusNone)
    return Status::Invalid(std::string(who) + ": the stream is capturing a graph; check after the graph has run");
  e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
  return e == cudaSuccess ? Status::Ok() : cuda_error(who, e);
}

// Refuses a pointer the device cannot dereference: pageable host memory, e.g. a host array of
// grouped problem descriptors passed where the device copy belongs. The kernel's read of it
// would be an illegal address, which ends the caller's CUDA context. Device, managed and pinned
// host memory pass, as does anything on a system whose GPUs read pageable memory.
inline Status require_device_accessible(const std::string& who, const void* p, const char* what) {
  cudaPointerAttributes at{};
  cudaError_t e = cudaPointerGetAttributes(&at, p);
  if (e != cudaSuccess) return cuda_error(who + ": cudaPointerGetAttributes(" + what + ")", e);
  if (at.type != cudaMemoryTypeUnregistered) return Status::Ok();
  int device = 0, pageable = 0;
  e = cudaGetDevice(&device);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&pageable, cudaDevAttrPageableMemoryAccess, device);
  if (e != cudaSuccess) return cuda_error(who, e);
  if (pageable) return Status::Ok();
  return Status::Invalid(who + ": " + what + " is pageable host memory, which this device cannot read (pass device, " +
                         "managed or pinned memory)");
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
  LOWBIT_RETURN_IF_ERROR(read_back(reader, workspace, host, sizeof(host), stream));
  if (host[0] == 0) return Status::Ok();
  return Status::Invalid(std::string(call) + ": " +
                         (host[1] >= 0 ? "group " + std::to_string(host[1]) + ": " : std::string()) + text(host[0]));
}

}  // namespace lowbit::gemm
