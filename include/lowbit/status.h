// Every lowbit entry point returns a Status: bad input is reported with a message, never
// a crash, a dead CUDA context or a silently wrong answer. What every call guarantees:
//
// Errors.   A call that returns an error has launched nothing: its outputs and its workspace are
//           as they were. (The one exception is a kCudaError from the CUDA runtime itself on a
//           later step of a multi-step call -- fused_moe_fp8, an NVFP4-activation nvfp4_gemm,
//           the grouped calls, sparse24_compress -- after every check passed; its outputs are then
//           undefined.) lowbit
//           leaves no CUDA error pending behind it: the caller's next cudaGetLastError sees only
//           the caller's own errors.
// Pointers. Every pointer argument must be memory the device can read: device, managed or pinned
//           host memory. Pageable host memory, a freed allocation or an address nothing allocated
//           is refused with kInvalidArgument (unless the device itself reads pageable memory, HMM
//           or ATS), never handed to a kernel; so is another GPU's memory where this GPU has no
//           peer access (where it has, the caller must have enabled it). A buffer the call
//           writes may share no memory with another argument (fp8_gemm's residual may be exactly
//           D). Pointers inside device-resident descriptors
//           (grouped problems) cannot be checked from the host: they must be device memory.
// Scalars.  Host floats that scale a result (alpha, NVFP4 global scales) must be finite: NaN and
//           Inf are refused in every family. Dequantization scales also must be > 0 (NVFP4
//           global scales; their product times 256 a normal FP32 value). Scales the kernels read
//           from device memory (a_scale, b_scale, sfa, sfb, w_scales) are used as given.
// Threads.  Every function may be called from any number of host threads at once, and each may
//           be a thread's first CUDA call (lowbit makes the current device's primary context
//           current on a thread that has none). Host caches (device properties, kernel attributes,
//           tensor-map templates) are race-free and keep no failure that a later call could
//           avoid (a cold thread's, a transient one). The configs the choosers pick are memoized
//           per (device, shape, epilogue, types, workspace size), up to 4096 each. Each host
//           thread that calls lowbit keeps up to 1024 encoded TMA descriptors (~200 KB, freed
//           with the thread), keyed by address, shape and layout: a repeated call skips the
//           driver's encode; a freed buffer's entry is never used for anything but that exact
//           spec. Calls that may run at the same time on the GPU (different streams) need
//           separate workspaces.
// Streams.  Work runs on the caller's stream, in stream order, with no allocation and no device or
//           stream synchronization, so every launching call can be captured in a CUDA graph.
//           Only the checking helpers synchronize -- fp8_grouped_check_status,
//           nvfp4_grouped_check_status, moe_check_status, sparse24_compress_checked -- and they
//           refuse a stream that is capturing. workspace_init is a stream-ordered memset.
// Sizes.    Size queries (*_workspace_size, *_bytes) return 0 for a call that needs no workspace
//           or a config no call runs (non-positive sizes, an unknown tile, splits < 1), and
//           otherwise at least the bytes needed, saturated at SIZE_MAX: never a wrapped, smaller
//           count.
#pragma once

#include <string>
#include <utility>

namespace lowbit {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,   // the caller's arguments break a documented rule
  kUnsupportedDevice, // no GPU, or not an sm_90 (Hopper) GPU
  kWorkspaceTooSmall, // the caller's workspace cannot hold what the chosen config needs
  kCudaError,         // a CUDA runtime or driver call failed
};

class Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }
  static Status Error(StatusCode code, std::string message) { return Status(code, std::move(message)); }
  static Status Invalid(std::string message) {
    return Status(StatusCode::kInvalidArgument, std::move(message));
  }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string to_string() const;

 private:
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

const char* status_code_name(StatusCode code);

inline std::string Status::to_string() const {
  return ok() ? std::string("OK") : std::string(status_code_name(code_)) + ": " + message_;
}

inline const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: return "InvalidArgument";
    case StatusCode::kUnsupportedDevice: return "UnsupportedDevice";
    case StatusCode::kWorkspaceTooSmall: return "WorkspaceTooSmall";
    case StatusCode::kCudaError: return "CudaError";
  }
  return "Unknown";
}

}  // namespace lowbit

#define LOWBIT_RETURN_IF_ERROR(expr)      \
  do {                                    \
    ::lowbit::Status _lb_st = (expr);     \
    if (!_lb_st.ok()) return _lb_st;      \
  } while (0)
