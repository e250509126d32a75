#include "lowbit/device.h"

#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <mutex>
#include <string>
#include <vector>

#include "common/context.h"

namespace lowbit {

uint64_t current_context_id() {
  // Through the runtime's driver entry points, like the tensor-map encoder: no link-time libcuda.
  static PFN_cuCtxGetCurrent_v4000 get_current = nullptr;
  static PFN_cuCtxGetId_v12000 get_id = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &p, 4000, cudaEnableDefault, &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
      get_current = reinterpret_cast<PFN_cuCtxGetCurrent_v4000>(p);
    p = nullptr;
    if (cudaGetDriverEntryPointByVersion("cuCtxGetId", &p, 12000, cudaEnableDefault, &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
      get_id = reinterpret_cast<PFN_cuCtxGetId_v12000>(p);
  });
  if (!get_current || !get_id) return 0;
  CUcontext ctx = nullptr;
  if (get_current(&ctx) != CUDA_SUCCESS || ctx == nullptr) return 0;
  unsigned long long id = 0;
  if (get_id(ctx, &id) != CUDA_SUCCESS) return 0;
  return static_cast<uint64_t>(id);
}

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
