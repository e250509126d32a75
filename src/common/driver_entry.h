// The driver entry points lowbit calls directly, reached through the runtime's entry-point query,
// so nothing links libcuda at build time.
#pragma once

#include <cuda_runtime.h>

namespace lowbit {

// The driver's `name` at the ABI of `version` (the PFN_<name>_v<version> type of cudaTypedefs.h),
// or nullptr where the driver has none; a failed query leaves no error behind. Callers keep the
// result in a function-local static: the query takes a lock in the runtime.
template <class Fn>
Fn driver_entry(const char* name, int version) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult q{};
  if (cudaGetDriverEntryPointByVersion(name, &p, version, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return reinterpret_cast<Fn>(p);
}

}  // namespace lowbit
