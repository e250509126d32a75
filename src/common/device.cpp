#include "lowbit/device.h"

#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <deque>
#include <mutex>
#include <string>

#include "common/context.h"
#include "common/device_cache.h"
#include "common/driver_entry.h"

namespace lowbit {

namespace {

// The context calls, looked up once.
struct DriverCalls {
  PFN_cuCtxGetCurrent_v4000 get_current = nullptr;
  PFN_cuCtxGetId_v12000 get_id = nullptr;
};

const DriverCalls& driver() {
  static const DriverCalls calls{driver_entry<PFN_cuCtxGetCurrent_v4000>("cuCtxGetCurrent", 4000),
                                 driver_entry<PFN_cuCtxGetId_v12000>("cuCtxGetId", 12000)};
  return calls;
}

// A thread whose first CUDA call is a lowbit call has no current context: the runtime binds one
// only at its first call that needs it, and the driver calls lowbit makes first (tensor-map
// encoding) then failed with CUDA_ERROR_INVALID_CONTEXT. cudaSetDevice binds the device's primary
// context, the one the runtime would use; a context the caller made current is left alone.
Status ensure_current_context(int device) {
  const DriverCalls& d = driver();
  CUcontext ctx = nullptr;
  if (d.get_current && d.get_current(&ctx) == CUDA_SUCCESS && ctx != nullptr) return Status::Ok();
  const cudaError_t err = cudaSetDevice(device);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return Status::Error(StatusCode::kCudaError, std::string("cudaSetDevice: ") + cudaGetErrorString(err));
  }
  return Status::Ok();
}

}  // namespace

CurrentContext current_context() {
  const DriverCalls& d = driver();
  CurrentContext c;
  if (!d.get_current || d.get_current(&c.handle) != CUDA_SUCCESS || c.handle == nullptr) return CurrentContext{};
  unsigned long long id = 0;
  if (d.get_id && d.get_id(c.handle, &id) == CUDA_SUCCESS) c.id = static_cast<uint64_t>(id);
  return c;
}

Status current_device(const DeviceInfo** out) {
  int dev = -1;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the "no device" error so later calls see a clean slate
    return Status::Error(StatusCode::kUnsupportedDevice,
                         std::string("no usable CUDA device: ") + cudaGetErrorString(err));
  }
  LOWBIT_RETURN_IF_ERROR(ensure_current_context(dev));
  // A deque keeps every entry where it is, so the pointers handed out stay valid.
  static std::mutex mu;
  static std::deque<DeviceInfo> cache;
  std::lock_guard<std::mutex> lock(mu);
  for (const auto& d : cache)
    if (d.device == dev) {
      *out = &d;
      return Status::Ok();
    }
  cudaDeviceProp prop{};
  err = cudaGetDeviceProperties(&prop, dev);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return Status::Error(StatusCode::kCudaError, std::string("cudaGetDeviceProperties: ") + cudaGetErrorString(err));
  }
  DeviceInfo d;
  d.device = dev;
  d.name = prop.name;
  d.cc_major = prop.major;
  d.cc_minor = prop.minor;
  d.sm_count = prop.multiProcessorCount;
  d.l2_bytes = static_cast<size_t>(prop.l2CacheSize);
  d.smem_per_block_optin = prop.sharedMemPerBlockOptin;
  d.smem_per_sm = prop.sharedMemPerMultiprocessor;
  d.reads_pageable_memory = prop.pageableMemoryAccess != 0;
  cache.push_back(d);
  *out = &cache.back();
  return Status::Ok();
}

Status current_hopper(const DeviceInfo** out) {
  const DeviceInfo* d = nullptr;
  LOWBIT_RETURN_IF_ERROR(current_device(&d));
  if (!d->is_hopper())
    return Status::Error(StatusCode::kUnsupportedDevice,
                         "lowbit kernels need an sm_90 (Hopper) GPU; device " + std::to_string(d->device) + " is " +
                             d->name + " (sm_" + std::to_string(d->cc_major) + std::to_string(d->cc_minor) + ")");
  *out = d;
  return Status::Ok();
}

Status query_device(DeviceInfo* out) {
  if (!out) return Status::Invalid("query_device: out must be non-null");
  const DeviceInfo* d = nullptr;
  LOWBIT_RETURN_IF_ERROR(current_device(&d));
  *out = *d;
  return Status::Ok();
}

Status require_hopper(DeviceInfo* out) {
  const DeviceInfo* d = nullptr;
  LOWBIT_RETURN_IF_ERROR(current_hopper(&d));
  if (out) *out = *d;
  return Status::Ok();
}

}  // namespace lowbit
