// The current CUDA context's process-unique id, for host caches of per-context state (a kernel's
// shared-memory opt-in). A cache keyed by device alone outlives cudaDeviceReset: the reset's new
// primary context no longer has the opt-in, and every later launch of the kernel failed.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace lowbit {

// The calling thread's current context and its id. Both are null / 0 when no context is current
// yet; the id is 0 where the driver cannot tell (callers then skip their caches).
struct CurrentContext {
  CUcontext handle = nullptr;
  uint64_t id = 0;
};
CurrentContext current_context();
inline uint64_t current_context_id() { return current_context().id; }

}  // namespace lowbit
