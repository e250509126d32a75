// The floor under lowbit's host cost per call: one cudaLaunchKernel of an empty kernel whose
// parameters are as large as the FP8 GEMM's (four TMA descriptors and a parameter block).
#pragma once

#include <cuda_runtime.h>

namespace lowbit::bench {

cudaError_t launch_empty_like_gemm(cudaStream_t stream);

}  // namespace lowbit::bench
