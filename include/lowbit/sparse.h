// 2:4 structured-sparse GEMM on Hopper (wgmma.mma_async.sp):
//   D[M,N] = alpha * a_scale * b_scale * A[M,K] . B[N,K]^T
// A is 2:4 sparse along K (every group of 4 consecutive elements of a row holds at most 2
// nonzeros) and passed compressed: its kept values [M, K/2] and prepacked metadata (the layout
// is lowbit's own, documented in src/formats/sparse24_layout.h; sparse24_compress writes it).
// B is dense and K-major. E4M3 x E4M3 or F16 x F16, FP32 accumulation, BF16 out (or FP16 for F16
// inputs).
//
// Models hold the sparse operand as the weight W[O,K] and multiply activations X[T,K]: the
// hardware wants the sparse operand on the A side, so call it with A = W, B = X (D = [O,T]).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "lowbit/status.h"

namespace lowbit {

enum class SparseType { kE4M3 = 0, kF16 = 1 };
// D's element type. FP16 (3 more mantissa bits than BF16, cuSPARSELt's F16 output) is compiled
// for F16 inputs.
enum class SparseOut { kBF16 = 0, kFP16 = 1 };

// Bytes of the prepacked metadata of an [m, k] sparse A (M padded to 128, K to a pair of K blocks).
size_t sparse24_meta_bytes(int64_t m, int64_t k, SparseType type);

// Compresses a dense row-major [m, k] A (E4M3 bytes or F16 halves, 16-byte aligned) into
// `values` ([m, k/2] of the same type) and `meta` (sparse24_meta_bytes). k % 32 == 0.
// Every buffer must be device-accessible (device, managed or pinned memory; checked).
// Stream-ordered, no synchronization: `*violation` (device memory) receives the lowest index
// row * (k/4) + group of a group with more than 2 nonzeros, or -1 when A is 2:4. With `prune`,
// such groups keep their two largest magnitudes (ties to the lower index) instead, and
// `violation` (may then be null) is -1 afterwards.
Status sparse24_compress(const void* dense, int64_t m, int64_t k, SparseType type, bool prune, void* values,
                         void* meta, int64_t* violation, cudaStream_t stream);

// sparse24_compress, then waits for `stream` and returns an error naming the first violating
// group. It synchronizes (meant for one-time weight preparation), so a stream under graph
// capture is refused before anything is queued; `violation` is caller scratch.
Status sparse24_compress_checked(const void* dense, int64_t m, int64_t k, SparseType type, void* values, void* meta,
                                 int64_t* violation, cudaStream_t stream);

// Host version of sparse24_compress (same output bytes), for tests and offline preparation.
// Returns an error naming the first violating group unless `prune`.
Status sparse24_compress_host(const void* dense, int64_t m, int64_t k, SparseType type, bool prune, void* values,
                              void* meta);

struct Sparse24GemmArgs {
  int64_t m = 0;  // rows of A and D, any M >= 1
  int64_t n = 0;  // rows of B, columns of D: a multiple of 16
  int64_t k = 0;  // logical K: a multiple of 32
  SparseType type = SparseType::kE4M3;
  const void* a_values = nullptr;  // [m, k/2], 16-byte aligned
  const void* a_meta = nullptr;    // sparse24_meta_bytes(m, k, type), 16-byte aligned
  const void* b = nullptr;         // [n, k] dense, K-major, 16-byte aligned
  void* d = nullptr;               // [m, n] of `out`, 16-byte aligned
  SparseOut out = SparseOut::kBF16;
  float alpha = 1.0f;
  const float* a_scale = nullptr;  // optional device scalars (per-tensor dequant scales)
  const float* b_scale = nullptr;
  // Caller-owned split-K scratch, as Fp8GemmArgs::workspace (zero-filled once; 0 bytes: no split).
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  // E4M3 only (F16 MMAs accumulate in FP32 either way). false: the tensor cores' partial sums are
  // promoted into FP32 registers every 256 products, so the error matches dense cuBLASLt's.
  // true: they accumulate across the whole K range in the tensor cores' narrower FP8 accumulator,
  // as cuSPARSELt does (the same error on the same inputs: ~1.25x the promoted one at K = 8192,
  // growing with K), ~1.25x faster. cuBLASLt calls this CUBLASLT_MATMUL_DESC_FAST_ACCUM.
  bool fast_accum = false;
};

struct Sparse24GemmConfig {
  int block_n = 128;     // tile width: 64, 128 or 256 (tile: 128 rows x block_n)
  int splits = 1;        // split-K factor
  int raster_group = 0;  // 0 = auto
  int grid = 0;          // persistent CTAs; 0 = min(work units, SM count)
  int cluster = 1;       // 2: CTA pairs along M share each B tile by TMA multicast (bn=256, M > 64, splits = 1)
  std::string reason;
  std::string to_string() const;
};

// Parses "bn=128,splits=2,group=8,grid=132,cluster=2" (any subset).
Status parse_sparse24_config(const std::string& text, Sparse24GemmConfig* out);
// `fast_accum` as Sparse24GemmArgs::fast_accum (the kernels differ).
Status choose_sparse24_config(int64_t m, int64_t n, int64_t k, SparseType type, Sparse24GemmConfig* out,
                              bool fast_accum = false);
size_t sparse24_gemm_workspace_size(int64_t m, int64_t n, int64_t k, SparseType type, const Sparse24GemmConfig& config);

// Runs on `stream`; no allocation, no synchronization. config == nullptr: lowbit chooses.
Status sparse24_gemm(const Sparse24GemmArgs& args, cudaStream_t stream, const Sparse24GemmConfig* config = nullptr);

}  // namespace lowbit
