// The floor under lowbit's host cost per call: one cudaLaunchKernel of an empty kernel whose
// parameters are as large as the FP8 GEMM's (four TMA descriptors and a parameter block).
#pragma once

#include <cuda_runtime.h>

namespace lowbit::bench {

cudaError_t launch_empty_like_gemm(cudaStream_t stream);
// The same launch with fewer parameter bytes, to see what the parameters cost: the four tensor
// maps alone (512 B), and one pointer (8 B).
cudaError_t launch_empty_maps_only(cudaStream_t stream);
cudaError_t launch_empty_one_pointer(cudaStream_t stream);
// The GEMM-sized and the one-pointer launches through the driver API (cuLaunchKernel), to see what
// the runtime's launch path adds.
cudaError_t launch_empty_like_gemm_driver(cudaStream_t stream);
cudaError_t launch_empty_one_pointer_driver(cudaStream_t stream);

}  // namespace lowbit::bench
