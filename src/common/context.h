// The current CUDA context's process-unique id, for host caches of per-context state (a kernel's
// shared-memory opt-in). A cache keyed by device alone outlives cudaDeviceReset: the reset's new
// primary context no longer has the opt-in, and every later launch of the kernel failed.
#pragma once

#include <cstdint>

namespace lowbit {

// 0 when no context is current yet or the driver cannot tell (callers then skip their cache).
uint64_t current_context_id();

}  // namespace lowbit
