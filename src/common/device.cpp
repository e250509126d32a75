#include "lowbit/device.h"

#include <cuda_runtime.h>

#include <mutex>
#include <string>
#include <vector>

namespace lowbit {

Status query_device(DeviceInfo* out) {
  int dev = -1;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error so later calls see a clean slate
    return Status::Error(StatusCode::kUnsupportedDevice,
                         std::string("no usable CUDA device: ") + cudaGetErrorString(err));
  }
  static std::mutex mu;
  static std::vector<DeviceInfo> cache;
  std::lock_guard<std::mutex> lock(mu);
  for (const auto& d : cache)
    if (d.device == dev) {
      *out = d;
      return Status::Ok();
    }
  cudaDeviceProp prop{};
  err = cudaGetDeviceProperties(&prop, dev);
  if (err != cudaSuccess)
    return Status::Error(StatusCode::kCudaError, std::string("cudaGetDeviceProperties: ") + cudaGetErrorString(err));
  DeviceInfo d;
  d.device = dev;
  d.name = prop.name;
  d.cc_major = prop.major;
  d.cc_minor = prop.minor;
  d.sm_count = prop.multiProcessorCount;
  d.l2_bytes = static_cast<size_t>(prop.l2CacheSize);
  d.smem_per_block_optin = prop.sharedMemPerBlockOptin;
  d.smem_per_sm = prop.sharedMemPerMultiprocessor;
  cache.push_back(d);
  *out = d;
  return Status::Ok();
}

Status require_hopper(DeviceInfo* out) {
  DeviceInfo d;
  LOWBIT_RETURN_IF_ERROR(query_device(&d));
  if (!d.is_hopper())
    return Status::Error(StatusCode::kUnsupportedDevice,
                         "lowbit kernels need an sm_90 (Hopper) GPU; device " + std::to_string(d.device) + " is " +
                             d.name + " (sm_" + std::to_string(d.cc_major) + std::to_string(d.cc_minor) + ")");
  if (out) *out = d;
  return Status::Ok();
}

}  // namespace lowbit
