// The one argument checker of every public entry point: sizes and their limits, pointer nullness,
// alignment and kind (memory the device can read), finite scalars, and overflow-safe element and
// byte products. A call builds one ArgCheck, names each argument once, and finishes with
// `device()`, which also checks the GPU and makes its context current on the calling thread.
//
// Order: the cheap host checks first (every one of them runs on a machine without a GPU), the
// device and the pointer kinds last. The first failure wins; later checks are skipped, and no
// message is built unless something failed, so a good call pays a few branches per argument plus
// one pointer-attribute query (~0.05 us) per device pointer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "lowbit/device.h"
#include "lowbit/status.h"

namespace lowbit::check {

// ---- overflow-safe arithmetic ----------------------------------------------------------------

// a * b for a, b >= 0; false (and *out untouched) when the product does not fit int64.
inline bool mul(int64_t a, int64_t b, int64_t* out) {
  if (a < 0 || b < 0) return false;
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) return false;
  *out = r;
  return true;
}

// Saturating size arithmetic for size queries: SIZE_MAX (never a wrapped, smaller value) when
// the exact count does not fit, or when a factor is negative.
inline size_t sat_mul(size_t a, size_t b) {
  size_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? SIZE_MAX : r;
}
inline size_t sat_add(size_t a, size_t b) {
  size_t r = 0;
  return __builtin_add_overflow(a, b, &r) ? SIZE_MAX : r;
}
inline size_t sat_size(int64_t v) { return v < 0 ? SIZE_MAX : static_cast<size_t>(v); }

// "2^31 - 257", "2^30", or the decimal value: how messages write a limit.
std::string limit_text(int64_t v);

// ---- the checker -----------------------------------------------------------------------------

// Whether a pointer argument may be null.
enum class Null { kRefused, kAllowed };

// How the call uses a buffer, for the overlap rule: a buffer the call writes shares no byte with
// any other argument (an input read while an output is written would give a silently wrong
// answer), except that a kReadAliasOk buffer may be exactly the output it is read for (residual
// == D: each element is read before its own tile is written).
enum class Access { kRead, kWrite, kReadAliasOk };

// Bytes of a buffer of a * b * c elements of `elem` bytes, saturated at INT64_MAX (the shape
// checks bound the real ones far below; a saturated extent only widens the overlap check).
inline int64_t extent(int64_t a, int64_t b, int64_t c = 1, int64_t elem = 1) {
  int64_t r = 0;
  return mul(a, b, &r) && mul(r, c, &r) && mul(r, elem, &r) ? r : INT64_MAX;
}
// a + b for extents, saturated at INT64_MAX (either may already be saturated).
inline int64_t extent_add(int64_t a, int64_t b) {
  if (a < 0 || b < 0) return INT64_MAX;
  return a > INT64_MAX - b ? INT64_MAX : a + b;
}
// ceil(a / b) for b > 0 that cannot overflow (the extents are computed before the shape checks
// have passed, for any value a caller sends).
inline int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b > 0); }
// A caller's byte count (a workspace size) as an extent.
inline int64_t extent_of(size_t bytes) { return bytes > static_cast<size_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(bytes); }

class ArgCheck {
 public:
  explicit ArgCheck(const char* who) : who_(who) {}

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }

  // A size: >= `min` (1 unless a call accepts 0), a multiple of `multiple`, at most `max`.
  ArgCheck& dim(const char* name, int64_t value, int64_t multiple, int64_t max, int64_t min = 1);
  // a * b at most `max` (e.g. an output's element count); `what` names the product ("M x N").
  ArgCheck& product(const char* what, int64_t a, int64_t b, int64_t max);
  // A pointer: non-null unless allowed, `align`-byte aligned, and -- in device() -- memory the
  // device can read and write (device, managed or pinned host memory). With `bytes` > 0 its
  // extent joins the overlap rule (Access).
  ArgCheck& ptr(const char* name, const void* p, size_t align, Null null = Null::kRefused, int64_t bytes = 0,
                Access access = Access::kRead);
  // An output: ptr(..., bytes, kWrite).
  ArgCheck& out(const char* name, void* p, size_t align, int64_t bytes, Null null = Null::kRefused) {
    return ptr(name, p, align, null, bytes, Access::kWrite);
  }
  // A host float the kernels multiply by: finite (NaN and Inf are refused in every family;
  // lowbit/status.h states the rule).
  ArgCheck& finite(const char* name, float value);
  // Any other rule: when `bad`, fail with "<who>: <message()>"; the message is built only then.
  template <class Message>
  ArgCheck& rule(bool bad, const Message& message) {
    if (ok() && bad) fail(message());
    return *this;
  }
  // A failure with its own code (WorkspaceTooSmall), same rule as above.
  template <class Message>
  ArgCheck& rule(bool bad, StatusCode code, const Message& message) {
    if (ok() && bad) status_ = Status::Error(code, std::string(who_) + ": " + message());
    return *this;
  }

  // The overlap rule over the pointers named so far (device() runs it too); no CUDA call.
  ArgCheck& disjoint();
  // The GPU (an sm_90 device, its context current on this thread; *dev points to lowbit's cached
// description of it, valid for the process), the overlap rule and the kinds
  // of every pointer named so far. Returns the first failure of the whole check.
  Status device(const DeviceInfo** dev = nullptr);

 private:
  void fail(const std::string& message);

  static constexpr int kMaxPointers = 16;
  const char* who_;
  Status status_;
  struct Arg {
    const char* name;
    const void* p;
    int64_t bytes;
    Access access;
  };
  Arg args_[kMaxPointers] = {};
  int count_ = 0;
};

// Refuses memory the device cannot read: pageable host memory (unless the device reads it,
// HMM / ATS), a freed allocation, or an address nothing allocated. Its kernel's access would be
// an illegal address, which ends the caller's CUDA context. ArgCheck::device runs it per pointer.
// `current`: the calling thread's current device (ArgCheck::device has it at hand).
Status device_accessible(const char* who, const char* name, const void* p, int current);

}  // namespace lowbit::check
