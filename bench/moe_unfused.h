// The W6 baseline: the unfused MoE pipeline of the seed (7 kernels, each stage its own launch,
// a plain grouped GEMM writing expert rows to memory, a separate scatter), on the same inputs.
// Routing is lowbit's route stage (the same kernel in both pipelines).
#pragma once

#include <cuda_runtime.h>

#include "bench_util.h"
#include "lowbit/moe.h"

namespace lowbit::bench {

class UnfusedMoe {
 public:
  // Allocates the pipeline's own buffers for this shape (FP32 output only).
  Status init(const MoeShape& shape);
  // route -> count -> offsets + descriptors -> quantize -> sort+gather -> grouped GEMM (prepare +
  // GEMM) -> scatter. `lowbit_ws` receives the route stage's output.
  Status run(const FusedMoeArgs& args, void* lowbit_ws, size_t lowbit_ws_bytes, cudaStream_t stream);

 private:
  MoeShape s_{};
  int64_t rows_ = 0;
  DeviceBuffer counts_, offsets_, cursor_, xq_tok_, xs_tok_, xq_, xs_, pair_row_, d_rows_, problems_, grouped_ws_;
  size_t grouped_ws_bytes_ = 0;
};

}  // namespace lowbit::bench
