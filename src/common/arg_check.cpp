#include "common/arg_check.h"

#include "common/device_cache.h"
#include "common/driver_entry.h"

#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <cmath>
#include <cstdio>

namespace lowbit::check {

std::string limit_text(int64_t v) {
  for (int p = 62; p >= 16; --p) {
    const int64_t pow2 = int64_t{1} << p;
    if (v == pow2) return "2^" + std::to_string(p);
    if (v < pow2 && pow2 - v < 1024) return "2^" + std::to_string(p) + " - " + std::to_string(pow2 - v);
  }
  return std::to_string(v);
}

void ArgCheck::fail(const std::string& message) { status_ = Status::Invalid(std::string(who_) + ": " + message); }

ArgCheck& ArgCheck::dim(const char* name, int64_t value, int64_t multiple, int64_t max, int64_t min) {
  if (!ok()) return *this;
  const std::string got = " (got " + std::to_string(value) + ")";
  if (value < min || value % multiple != 0) {
    if (multiple > 1)
      fail(std::string(name) + " must be a " + (min > 0 ? "positive " : "non-negative ") + "multiple of " +
           std::to_string(multiple) + got);
    else
      fail(std::string(name) + " must be >= " + std::to_string(min) + got);
  } else if (value > max) {
    fail(std::string(name) + " must be at most " + limit_text(max) + got);
  }
  return *this;
}

ArgCheck& ArgCheck::product(const char* what, int64_t a, int64_t b, int64_t max) {
  int64_t r = 0;
  if (ok() && (!mul(a, b, &r) || r > max))
    fail(std::string(what) + " must be at most " + limit_text(max) + " (got " + std::to_string(a) + " x " +
         std::to_string(b) + ")");
  return *this;
}

ArgCheck& ArgCheck::ptr(const char* name, const void* p, size_t align, Null null, int64_t bytes, Access access) {
  if (!ok()) return *this;
  if (p == nullptr) {
    if (null == Null::kRefused) fail(std::string(name) + " must be non-null");
    return *this;
  }
  if (reinterpret_cast<uintptr_t>(p) % align != 0) {
    char addr[32];
    std::snprintf(addr, sizeof(addr), "%p", p);
    fail(std::string(name) + " must be " + std::to_string(align) + "-byte aligned (got " + addr + ")");
    return *this;
  }
  if (count_ == kMaxPointers) {
    fail("internal: more than " + std::to_string(kMaxPointers) + " pointers to check");
    return *this;
  }
  args_[count_++] = Arg{name, p, bytes, access};
  return *this;
}

ArgCheck& ArgCheck::disjoint() {
  for (int i = 0; i < count_ && ok(); ++i)
    for (int j = i + 1; j < count_ && ok(); ++j) {
      const Arg& x = args_[i];
      const Arg& y = args_[j];
      if (x.bytes <= 0 || y.bytes <= 0) continue;
      if (x.access != Access::kWrite && y.access != Access::kWrite) continue;
      const uintptr_t x0 = reinterpret_cast<uintptr_t>(x.p), y0 = reinterpret_cast<uintptr_t>(y.p);
      // Extents are below 2^63 and user addresses below 2^57: no wrap.
      const bool overlap = x0 < y0 + static_cast<uint64_t>(y.bytes) && y0 < x0 + static_cast<uint64_t>(x.bytes);
      if (!overlap) continue;
      const bool exact_alias = x0 == y0 && x.bytes == y.bytes &&
                               ((x.access == Access::kWrite && y.access == Access::kReadAliasOk) ||
                                (y.access == Access::kWrite && x.access == Access::kReadAliasOk));
      if (exact_alias) continue;
      const Arg& w = x.access == Access::kWrite ? x : y;
      const Arg& o = &w == &x ? y : x;
      fail(std::string(w.name) + " overlaps " + o.name +
           ": a buffer the call writes may share no memory with another argument");
    }
  return *this;
}

ArgCheck& ArgCheck::finite(const char* name, float value) {
  if (ok() && !std::isfinite(value))
    fail(std::string(name) + " must be finite (got " + std::to_string(value) + ")");
  return *this;
}

Status ArgCheck::device(const DeviceInfo** dev) {
  if (!ok()) return status_;
  if (!disjoint().ok()) return status_;
  const DeviceInfo* d = nullptr;
  status_ = current_hopper(&d);
  for (int i = 0; i < count_ && status_.ok(); ++i)
    status_ = device_accessible(who_, args_[i].name, args_[i].p, d->device);
  if (status_.ok() && dev) *dev = d;
  return status_;
}

namespace {

// cuPointerGetAttributes, asked for the four attributes the check reads, costs about half of
// cudaPointerGetAttributes (0.046 against 0.08-0.11 us on the H100's host; docs/perf.md, P1 "The
// launch through the driver"), and it leaves no error behind for an address nothing allocated:
// the attributes read as zero.
PFN_cuPointerGetAttributes_v7000 pointer_attributes() {
  static const auto fn = driver_entry<PFN_cuPointerGetAttributes_v7000>("cuPointerGetAttributes", 7000);
  return fn;
}

}  // namespace

Status device_accessible(const char* who, const char* name, const void* p, int current) {
  const PFN_cuPointerGetAttributes_v7000 query = pointer_attributes();
  CUpointer_attribute attrs[4] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                  CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_DEVICE_POINTER};
  unsigned int type = 0;
  unsigned int managed = 0;
  int device = -1;
  CUdeviceptr device_pointer = 0;
  void* values[4] = {&type, &managed, &device, &device_pointer};
  if (query == nullptr || query(4, attrs, values, reinterpret_cast<CUdeviceptr>(p)) != CUDA_SUCCESS) {
    // The query may fail as a whole where one attribute has no answer in this context (memory this
    // context has no mapping of: another device's, another context's registration). The runtime's
    // query classifies those, as the check did before.
    cudaPointerAttributes at{};
    const cudaError_t e = cudaPointerGetAttributes(&at, p);
    if (e != cudaSuccess) {
      cudaGetLastError();  // leave no error behind for the caller's next CUDA call
      return Status::Error(StatusCode::kCudaError,
                           std::string(who) + ": cudaPointerGetAttributes(" + name + "): " + cudaGetErrorString(e));
    }
    managed = at.type == cudaMemoryTypeManaged;
    type = at.type == cudaMemoryTypeHost     ? CU_MEMORYTYPE_HOST
           : at.type == cudaMemoryTypeDevice ? CU_MEMORYTYPE_DEVICE
                                             : 0;
    device = at.device;
    device_pointer = reinterpret_cast<CUdeviceptr>(at.devicePointer);
  }
  if (managed) return Status::Ok();
  if (type == CU_MEMORYTYPE_HOST && device_pointer != 0) return Status::Ok();
  if (type == CU_MEMORYTYPE_DEVICE) {
    // Another GPU's memory: readable only through peer access, which this GPU must support (the
    // caller must also have enabled it; the runtime cannot be asked without changing it).
    int peer = 0;
    if (device == current) return Status::Ok();
    if (cudaDeviceCanAccessPeer(&peer, current, device) != cudaSuccess) cudaGetLastError();
    if (peer) return Status::Ok();
    return Status::Invalid(std::string(who) + ": " + name + " is memory of device " + std::to_string(device) +
                           ", which the current device " + std::to_string(current) + " cannot access");
  }
  // Unregistered: pageable host memory, a freed allocation, or no allocation at all. Only a
  // device that reads the host's pageable memory (HMM, ATS) can use it.
  const DeviceInfo* d = nullptr;
  if (current_device(&d).ok() && d->reads_pageable_memory) return Status::Ok();
  char addr[32];
  std::snprintf(addr, sizeof(addr), "%p", p);
  return Status::Invalid(std::string(who) + ": " + name + " (" + addr +
                         ") is not memory the device can read: pageable host memory, a freed allocation or an "
                         "address nothing allocated (pass device, managed or pinned host memory)");
}

}  // namespace lowbit::check
