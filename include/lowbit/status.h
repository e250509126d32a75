// Every lowbit entry point returns a Status: bad input is reported with a message, never
// a crash and never a silently wrong answer.
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
