#include "hopper/launch.h"

#include <cuda.h>
#include <cudaTypedefs.h>

#include <climits>
#include <cstdint>

#include "common/context.h"
#include "common/driver_entry.h"

namespace lowbit::hopper {
namespace {

PFN_cuLaunchKernelEx_v11060 driver_launch() {
  static const auto fn = driver_entry<PFN_cuLaunchKernelEx_v11060>("cuLaunchKernelEx", 11060);
  return fn;
}

// The driver's stream-to-context query, looked up once (the thread's own context:
// current_context, common/context.h).
PFN_cuStreamGetCtx_v12050 stream_context_call() {
  static const auto fn = driver_entry<PFN_cuStreamGetCtx_v12050>("cuStreamGetCtx", 12050);
  return fn;
}

// A kernel's function in one context (cudaGetFuncBySymbol). Launching the function costs about
// 0.2 us less host time than launching the context-independent kernel handle, which the driver
// resolves to it on every launch (docs/perf.md P1, "The launch through the driver"). Each thread
// keeps the ones it asked for, direct-mapped by kernel address and keyed by the context's id too:
// ids are never reused in a process, so a function of a destroyed context (cudaDeviceReset) is
// never found again; a colliding kernel replaces the older entry.
struct FunctionEntry {
  const void* kernel;
  unsigned long long context;
  CUfunction function;
};
FunctionEntry& function_entry(const void* kernel) {
  static constexpr int kSlots = 256;
  thread_local FunctionEntry cache[kSlots] = {};
  return cache[(reinterpret_cast<uintptr_t>(kernel) >> 4) % kSlots];
}
cudaError_t function_of(const void* kernel, unsigned long long context, CUfunction* out) {
  FunctionEntry& e = function_entry(kernel);
  if (context != 0 && e.kernel == kernel && e.context == context) {
    *out = e.function;
    return cudaSuccess;
  }
  cudaFunction_t f = nullptr;
  const cudaError_t err = cudaGetFuncBySymbol(&f, kernel);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return err;
  }
  if (context != 0) e = FunctionEntry{kernel, context, reinterpret_cast<CUfunction>(f)};
  *out = reinterpret_cast<CUfunction>(f);
  return cudaSuccess;
}

// A launch runs in its stream's context, not the calling thread's (cuLaunchKernelEx): a stream of
// another context -- another device's -- would run the kernel there, on arguments checked, sized
// and mapped for this one, and the function is this context's. The runtime's launch refused such
// a stream, and so does this. The null, legacy and per-thread streams are the current context's.
// A green context's streams count as their device's primary context, whose memory they share
// (cuStreamGetCtx_v2). Where the driver cannot tell (no current context, an older driver), the
// launch goes ahead as the runtime's would.
bool stream_of_another_context(cudaStream_t stream, CUcontext current) {
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread) return false;
  const PFN_cuStreamGetCtx_v12050 context_of = stream_context_call();
  if (context_of == nullptr || current == nullptr) return false;
  CUcontext of_stream = nullptr;
  CUgreenCtx green = nullptr;
  if (context_of(reinterpret_cast<CUstream>(stream), &of_stream, &green) != CUDA_SUCCESS) return false;
  if (of_stream == current) return false;
  // Only a green context made current (cuCtxFromGreenCtx) gets here without a foreign stream: the
  // driver names its device's primary context for the thread's per-thread stream. Never ask the
  // legacy null stream: under a global-mode capture that query invalidates a blocking stream's
  // capture (docs/perf.md P1, "The context check under capture").
  CUcontext thread_primary = nullptr;
  if (context_of(CU_STREAM_PER_THREAD, &thread_primary, &green) != CUDA_SUCCESS) return false;
  return of_stream != thread_primary;
}

}  // namespace

cudaError_t launch_params(const void* kernel, const LaunchShape& shape, cudaStream_t stream, void** params) {
  const PFN_cuLaunchKernelEx_v11060 launch = driver_launch();
  if (launch == nullptr) return cudaErrorNotSupported;
  if (shape.smem_bytes > UINT_MAX) return cudaErrorInvalidValue;
  const CurrentContext current = current_context();
  if (stream_of_another_context(stream, current.handle)) return cudaErrorInvalidResourceHandle;
  CUfunction f = nullptr;
  cudaError_t e = function_of(kernel, current.id, &f);
  if (e != cudaSuccess) return e;
  CUlaunchAttribute attrs[2];
  unsigned n = 0;
  if (shape.cluster > 1) {
    attrs[n] = CUlaunchAttribute{};
    attrs[n].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attrs[n].value.clusterDim.x = shape.cluster;
    attrs[n].value.clusterDim.y = 1;
    attrs[n].value.clusterDim.z = 1;
    ++n;
  }
  if (shape.pdl) {
    attrs[n] = CUlaunchAttribute{};
    attrs[n].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attrs[n].value.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  CUlaunchConfig config{};
  config.gridDimX = shape.grid.x;
  config.gridDimY = shape.grid.y;
  config.gridDimZ = shape.grid.z;
  config.blockDimX = shape.block.x;
  config.blockDimY = shape.block.y;
  config.blockDimZ = shape.block.z;
  config.sharedMemBytes = static_cast<unsigned>(shape.smem_bytes);
  config.hStream = reinterpret_cast<CUstream>(stream);
  config.attrs = n > 0 ? attrs : nullptr;
  config.numAttrs = n;
  // In the calling thread's current context (ArgCheck::device made one current), whose function
  // this is; a stream is of that context too (stream_of_another_context).
  CUresult r = launch(&config, f, params, nullptr);
  if (r == CUDA_ERROR_INVALID_HANDLE) {
    // A function the runtime no longer knows (its modules were loaded again): ask once more.
    function_entry(kernel) = FunctionEntry{};
    e = function_of(kernel, current.id, &f);
    if (e != cudaSuccess) return e;
    r = launch(&config, f, params, nullptr);
  }
  return static_cast<cudaError_t>(r);
}

}  // namespace lowbit::hopper
