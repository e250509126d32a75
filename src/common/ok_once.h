// A host cache that remembers only success: the first call whose `make` succeeds fills it, and
// every later call reads it without a lock. A failure (no context yet on a cold thread, a
// transient driver error) goes back to that caller and is not kept, so the next call tries
// again. (A std::call_once cache kept a cold thread's failed tensor-map encoding for the life of
// the process.)
#pragma once

#include <atomic>
#include <mutex>

#include "lowbit/status.h"

namespace lowbit {

template <class T>
class OkOnce {
 public:
  // make(T*) -> Status fills the value; *out points to the cached value on success.
  template <class Make>
  Status get(const Make& make, const T** out) {
    if (!ready_.load(std::memory_order_acquire)) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!ready_.load(std::memory_order_relaxed)) {
        LOWBIT_RETURN_IF_ERROR(make(&value_));
        ready_.store(true, std::memory_order_release);
      }
    }
    *out = &value_;
    return Status::Ok();
  }

 private:
  std::mutex mu_;
  std::atomic<bool> ready_{false};
  T value_{};
};

}  // namespace lowbit
