// The floor under lowbit's host cost per call: one launch of an empty kernel whose parameters are
// as large as the FP8 GEMM's (four TMA descriptors and a parameter block); first through the
// runtime (<<<>>>).
#pragma once

#include <cuda_runtime.h>

namespace lowbit::bench {

cudaError_t launch_empty_like_gemm(cudaStream_t stream);
// The same launch through lowbit's own launch (hopper/launch.h: cuLaunchKernelEx on the kernel's
// handle), and through the driver's cuLaunchKernel on the runtime's registered function: what
// the runtime's launch path adds. The last with one pointer (8 B): what the parameter bytes cost.
cudaError_t launch_empty_like_gemm_lowbit(cudaStream_t stream);
cudaError_t launch_empty_like_gemm_driver(cudaStream_t stream);
cudaError_t launch_empty_one_pointer_driver(cudaStream_t stream);

}  // namespace lowbit::bench
