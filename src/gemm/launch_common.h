// Host pieces the launchers share: the shape rules every GEMM checks, the split-K workspace
// layout (gemm/core/split_k.cuh is the device fix-up) -- a fixed region of arrival counters, then
// `splits` FP32 partial tiles per tile -- the launch tail, and the checked read-backs.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdio>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/arg_check.h"
#include "gemm/a_box.h"
#include "gemm/grouped_status.h"
#include "lowbit/status.h"

namespace lowbit::gemm {

// The largest M, N or K of the dense GEMMs: a tile of padding below 2^31, so tile and row
// arithmetic in int cannot wrap. (NVFP4 keeps its own, lower limit: nvfp4/launch.cu.)
constexpr int64_t kMaxGemmDim = INT_MAX - 256;
// The largest output: M x N elements. The tile count (at least 64 x 64 per tile) then stays below
// the 2^30 units a launch walks (kMaxUnits); no memory holds an output this large anyway.
constexpr int64_t kMaxGemmOutput = int64_t{1} << 40;

// The shape rules every dense GEMM checks: M >= 1, N a positive multiple of 16 (16-byte rows for
// TMA), K a positive multiple of `k_multiple`, each at most `max_dim`, and M x N bounded.
inline check::ArgCheck& gemm_shape(check::ArgCheck& c, int64_t m, int64_t n, int64_t k, int k_multiple,
                                   int64_t max_dim = kMaxGemmDim) {
  return c.dim("M", m, 1, max_dim).dim("N", n, 16, max_dim).dim("K", k, k_multiple, max_dim).product(
      "M x N", m, n, kMaxGemmOutput);
}

// Split-K tile counters live in a fixed region at the start of a workspace (one int per tile, up
// to kSplitKMaxTiles tiles) that nothing else ever writes. Every split call leaves its counters at
// zero, so calls of any shape and kind can share one workspace after a single zero-fill; partials
// (and NVFP4's staged activations) start after the region. When the counters sat in front of
// partials sized per call, a split call with more tiles read an earlier call's partials (or
// staged activations) as its counters, and its fix-up skipped or raced tiles.
constexpr size_t kSplitKCounterBytes = 16384;
constexpr int64_t kSplitKMaxTiles = static_cast<int64_t>(kSplitKCounterBytes / sizeof(int));

// Saturates at SIZE_MAX where the partials would not fit size_t (a size query must never wrap
// to a smaller count).
inline size_t split_k_workspace_bytes(size_t tiles, int splits, int block_m, int block_n) {
  if (splits <= 1) return 0;
  const size_t tile_bytes = static_cast<size_t>(block_m) * block_n * sizeof(float);
  return check::sat_add(kSplitKCounterBytes, check::sat_mul(check::sat_mul(tiles, static_cast<size_t>(splits)), tile_bytes));
}

// CTAs resident at once in clusters of 2 ... 8 for a family's kernels that split K within a
// cluster (the GPCs need not divide into clusters, so the runtime is asked, through the first
// line compiled for each size); 0 where unknown. `specs` has `count` lines with .cluster_splits,
// `launchers` their launcher functions (the generated table: .resident).
struct ClusterCapacity {
  int ctas[9] = {};
};
template <class Spec, class LauncherFn>
ClusterCapacity cluster_capacity(const Spec* specs, LauncherFn const* launchers, int count, int device) {
  ClusterCapacity c;
  for (int i = 0; i < count; ++i)
    for (int s = 2; s <= specs[i].cluster_splits && s <= 8; ++s)
      if (c.ctas[s] == 0 && launchers[i]().resident(s, device, &c.ctas[s]) != cudaSuccess) {
        cudaGetLastError();  // the query's own error, not the caller's next one
        c.ctas[s] = 0;
      }
  return c;
}

// A split call's tiles must fit the counter region.
inline Status check_split_tiles(const char* who, int64_t tiles, int splits) {
  if (splits > 1 && tiles > kSplitKMaxTiles)
    return Status::Invalid(std::string(who) + ": split K covers at most " + std::to_string(kSplitKMaxTiles) +
                           " output tiles (got " + std::to_string(tiles) + "); use splits=1 or a wider tile");
  return Status::Ok();
}

// Points the kernel parameters' split-K buffers into the workspace where the launch splits K
// (`split`; by default where the schedule has splits).
template <class Params>
void bind_split_k_workspace(Params& p, void* workspace, bool split) {
  if (!split) return;
  p.tile_counters = static_cast<int*>(workspace);
  p.partials = reinterpret_cast<float*>(static_cast<char*>(workspace) + kSplitKCounterBytes);
}
template <class Params>
void bind_split_k_workspace(Params& p, void* workspace) {
  bind_split_k_workspace(p, workspace, p.sched.splits > 1);
}

// A failed launch or copy as a Status: "<what>: <CUDA's message>". The runtime also kept the
// error as its last error, which the caller's next cudaGetLastError would read as its own: it is
// taken back here (a sticky error, which ends the context, stays whatever lowbit does).
inline Status cuda_error(const std::string& what, cudaError_t e) {
  cudaGetLastError();
  return Status::Error(StatusCode::kCudaError, what + ": " + cudaGetErrorString(e));
}

// After a launch: the LOWBIT_LOG line ("[lowbit] <describe()>: grid G (U units)"; without the units
// where only the device knows them, units < 0) and the Status. `describe` (a callable returning
// std::string) runs only when logging or on an error, so a launch builds no strings.
template <class Describe>
Status launch_status(cudaError_t e, const Describe& describe, int launched, int64_t units) {
  static const bool log_launches = std::getenv("LOWBIT_LOG") != nullptr;
  if (log_launches && units >= 0)
    std::fprintf(stderr, "[lowbit] %s: grid %d (%lld units)\n", describe().c_str(), launched,
                 static_cast<long long>(units));
  else if (log_launches)
    std::fprintf(stderr, "[lowbit] %s: grid %d\n", describe().c_str(), launched);
  if (e != cudaSuccess) return cuda_error(describe() + " launch", e);
  return Status::Ok();
}

// Copies `bytes` of device memory at `src` to the host and waits for `stream`: the checking
// helpers' read-back. Refused while `stream` is capturing a graph, where the synchronous copy
// would invalidate the caller's capture. `who` prefixes the errors.
inline Status read_back(const char* who, const void* src, void* dst, size_t bytes, cudaStream_t stream) {
  LOWBIT_RETURN_IF_ERROR(check::ArgCheck(who).ptr("the workspace", src, 4).device());
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  cudaError_t e = cudaStreamIsCapturing(stream, &capture);
  if (e != cudaSuccess) return cuda_error(who, e);
  if (capture != cudaStreamCaptureStatusNone)
    return Status::Invalid(std::string(who) + ": the stream is capturing a graph; check after the graph has run");
  e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
  return e == cudaSuccess ? Status::Ok() : cuda_error(who, e);
}

// A grouped call's status block (gemm/grouped_status.h), read back as a Status: Ok when every
// group was computed, else "<call>: " and everything that was not. `reader` names the checking
// function in its own errors. Synchronizes `stream` (a checking aid, not for the hot path).
template <class Text>
Status read_grouped_status(const void* workspace, cudaStream_t stream, const char* reader, const char* call,
                           const Text& text) {
  GroupedStatus host{};
  LOWBIT_RETURN_IF_ERROR(read_back(reader, workspace, &host, sizeof(host), stream));
  const std::string what = grouped_status_text(host, text);
  if (what.empty()) return Status::Ok();
  return Status::Invalid(std::string(call) + ": " + what);
}

}  // namespace lowbit::gemm
