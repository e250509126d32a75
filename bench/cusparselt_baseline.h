// The cuSPARSELt baseline of W3: the same 2:4-sparse product through NVIDIA's library (structured
// descriptor, its own compression of A, a matmul search, then matmul), built only where
// cusparseLt.h is found (LOWBIT_CUSPARSELT_ROOT; on the GPU machine, PyTorch's copy). Without it,
// available() is false and the bench says so.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>

#include "lowbit/status.h"

namespace lowbit::bench {

class CusparseLtBaseline {
 public:
  CusparseLtBaseline();
  ~CusparseLtBaseline();
  static bool available();
  // D[M,N] (BF16 for E4M3 in, FP16 for F16 in) = alpha * A[M,K] . B[N,K]^T, all row-major; A dense
  // with 2:4 sparsity, compressed here (setup, never timed) into `sets` buffers, one per input set.
  Status plan(int64_t m, int64_t n, int64_t k, bool fp8, float alpha, int sets);
  Status compress(int set, const void* dense_a, cudaStream_t s);
  // Picks the fastest algorithm by cuSPARSELt's own search (setup).
  Status search(const void* b, void* d, cudaStream_t s);
  Status run(int set, const void* b, void* d, cudaStream_t s);
  const std::string& note() const { return note_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string note_;
};

}  // namespace lowbit::bench
