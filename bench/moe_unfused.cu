#include "moe_unfused.h"

#include <cuda_bf16.h>

#include <cub/block/block_scan.cuh>

#include "formats/quantize_device.cuh"
#include "lowbit/blockscaled.h"

namespace lowbit::bench {
namespace {

__global__ void count_kernel(const int32_t* ids, int pairs, int experts, int* counts) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < pairs && static_cast<unsigned>(ids[i]) < static_cast<unsigned>(experts)) atomicAdd(&counts[ids[i]], 1);
}

// Offsets (segments padded to 4 rows for the scale alignment) and one grouped-GEMM descriptor
// per expert. Experts <= 1024: one per thread.
__global__ void offsets_kernel(const int* counts, int experts, int n, int k, int64_t rows, const uint8_t* xq,
                               const float* xs, const uint8_t* w, const float* w_scales, float* d_rows, int* offsets,
                               int* cursor, Fp8GroupedProblem* problems) {
  using Scan = cub::BlockScan<int, 1024>;
  __shared__ typename Scan::TempStorage tmp;
  const int e = threadIdx.x;
  const int c = e < experts ? counts[e] : 0;
  int off = 0;
  Scan(tmp).ExclusiveSum((c + 3) / 4 * 4, off);
  if (e >= experts) return;
  offsets[e] = off;
  cursor[e] = 0;
  const int kb = k / 128, nb = (n + 127) / 128;
  Fp8GroupedProblem g{};
  g.m = c;
  g.n = n;
  g.k = k;
  g.a = xq + static_cast<int64_t>(off) * k;
  g.b = w + static_cast<int64_t>(e) * n * k;
  g.d = d_rows + static_cast<int64_t>(off) * n;
  g.sfa = xs + off;
  g.sfa_ld = rows;
  g.sfb = w_scales + static_cast<int64_t>(e) * nb * kb;
  problems[e] = g;
}

// Per token per 128 of K, the same rule as lowbit's gather stage; token order.
__global__ void quantize_kernel(const __nv_bfloat16* x, int k, uint8_t* xq, float* xs) {
  const int t = blockIdx.x;
  const int kb = k / 128;
  // Warp-uniform trip count: the scale reduction shuffles across the warp.
  for (int base = (threadIdx.x / 32) * 256; base < k; base += blockDim.x * 8) {
    const int kk = base + (threadIdx.x % 32) * 8;
    const bool inside = kk < k;
    float f[8], amax = 0.f;
    for (int i = 0; i < 8; ++i) {
      f[i] = inside ? __bfloat162float(x[static_cast<int64_t>(t) * k + kk + i]) : 0.f;
      amax = fmaxf(amax, fabsf(f[i]));
    }
    const formats::BlockScale bs = formats::block_scale_1x128(amax);
    const uint2 q = formats::quantize8_e4m3(f, bs.inv);
    const float scale = bs.scale;
    if (!inside) continue;
    *reinterpret_cast<uint2*>(xq + static_cast<int64_t>(t) * k + kk) = q;
    if (threadIdx.x % 16 == 0) xs[static_cast<int64_t>(t) * kb + kk / 128] = scale;
  }
}

// One block per routing pair: claim a slot, copy the token's quantized row and scales there.
__global__ void sort_gather_kernel(const int32_t* ids, int top_k, int experts, int k, int64_t rows, const int* offsets,
                                   int* cursor, const uint8_t* xq_tok, const float* xs_tok, uint8_t* xq, float* xs,
                                   int* pair_row) {
  __shared__ int s_row;
  const int pair = blockIdx.x, t = pair / top_k;
  if (threadIdx.x == 0) {
    const int e = ids[pair];
    s_row = static_cast<unsigned>(e) < static_cast<unsigned>(experts) ? offsets[e] + atomicAdd(&cursor[e], 1) : -1;
    pair_row[pair] = s_row;
  }
  __syncthreads();
  const int row = s_row;
  if (row < 0) return;
  for (int i = threadIdx.x * 16; i < k; i += blockDim.x * 16)
    *reinterpret_cast<uint4*>(xq + static_cast<int64_t>(row) * k + i) =
        *reinterpret_cast<const uint4*>(xq_tok + static_cast<int64_t>(t) * k + i);
  for (int b = threadIdx.x; b < k / 128; b += blockDim.x) xs[b * rows + row] = xs_tok[static_cast<int64_t>(t) * (k / 128) + b];
}

__global__ void scatter_kernel(const int* pair_row, const float* weights, const float* d_rows, int pairs, int top_k,
                               int n, float* y) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int n4 = n / 4;
  if (i >= static_cast<int64_t>(pairs) * n4) return;
  const int pair = static_cast<int>(i / n4), c = static_cast<int>(i % n4) * 4;
  const int row = pair_row[pair];
  if (row < 0) return;
  const float w = weights[pair];
  float4 v = *reinterpret_cast<const float4*>(d_rows + static_cast<int64_t>(row) * n + c);
  v.x *= w;
  v.y *= w;
  v.z *= w;
  v.w *= w;
  atomicAdd(reinterpret_cast<float4*>(y + static_cast<int64_t>(pair / top_k) * n + c), v);
}

}  // namespace

Status UnfusedMoe::init(const MoeShape& s) {
  s_ = s;
  const int64_t pairs = static_cast<int64_t>(s.m) * s.top_k;
  rows_ = (pairs + 3LL * s.experts + 3) / 4 * 4;
  LOWBIT_RETURN_IF_ERROR(counts_.alloc(4 * s.experts));
  LOWBIT_RETURN_IF_ERROR(offsets_.alloc(4 * s.experts));
  LOWBIT_RETURN_IF_ERROR(cursor_.alloc(4 * s.experts));
  LOWBIT_RETURN_IF_ERROR(xq_tok_.alloc(static_cast<size_t>(s.m) * s.k));
  LOWBIT_RETURN_IF_ERROR(xs_tok_.alloc(static_cast<size_t>(s.m) * (s.k / 128) * 4));
  LOWBIT_RETURN_IF_ERROR(xq_.alloc(static_cast<size_t>(rows_) * s.k));
  LOWBIT_RETURN_IF_ERROR(xs_.alloc(static_cast<size_t>(rows_) * (s.k / 128) * 4));
  LOWBIT_RETURN_IF_ERROR(pair_row_.alloc(4 * pairs));
  LOWBIT_RETURN_IF_ERROR(d_rows_.alloc(static_cast<size_t>(rows_) * s.n * 4));
  LOWBIT_RETURN_IF_ERROR(problems_.alloc(sizeof(Fp8GroupedProblem) * s.experts));
  grouped_ws_bytes_ = fp8_grouped_workspace_size(s.experts);
  return grouped_ws_.alloc(grouped_ws_bytes_);
}

Status UnfusedMoe::run(const FusedMoeArgs& a, void* ws, size_t ws_bytes, cudaStream_t st) {
  const MoeShape& s = s_;
  if (s.m == 0) return Status::Ok();
  LOWBIT_RETURN_IF_ERROR(moe_run_stage(MoeStage::kRoute, a, ws, ws_bytes, st));
  MoeWorkspaceView v;
  LOWBIT_RETURN_IF_ERROR(moe_workspace_view(s, a.reduce, a.y_type, ws, ws_bytes, &v));
  const int32_t* ids = a.topk_ids ? a.topk_ids : v.topk_ids;
  const float* weights = a.topk_weights ? a.topk_weights : v.topk_weights;
  const int pairs = s.m * s.top_k;
  int* counts = static_cast<int*>(counts_.p);
  LOWBIT_RETURN_IF_ERROR(cuda_status(cudaMemsetAsync(counts, 0, 4 * s.experts, st), "memset"));
  count_kernel<<<(pairs + 255) / 256, 256, 0, st>>>(ids, pairs, s.experts, counts);
  offsets_kernel<<<1, 1024, 0, st>>>(counts, s.experts, s.n, s.k, rows_, static_cast<uint8_t*>(xq_.p),
                                     static_cast<float*>(xs_.p), static_cast<const uint8_t*>(a.w), a.w_scales,
                                     static_cast<float*>(d_rows_.p), static_cast<int*>(offsets_.p),
                                     static_cast<int*>(cursor_.p), static_cast<Fp8GroupedProblem*>(problems_.p));
  quantize_kernel<<<s.m, 256, 0, st>>>(static_cast<const __nv_bfloat16*>(a.x), s.k, static_cast<uint8_t*>(xq_tok_.p),
                                       static_cast<float*>(xs_tok_.p));
  sort_gather_kernel<<<pairs, 128, 0, st>>>(ids, s.top_k, s.experts, s.k, rows_, static_cast<int*>(offsets_.p),
                                            static_cast<int*>(cursor_.p), static_cast<uint8_t*>(xq_tok_.p),
                                            static_cast<float*>(xs_tok_.p), static_cast<uint8_t*>(xq_.p),
                                            static_cast<float*>(xs_.p), static_cast<int*>(pair_row_.p));
  LOWBIT_RETURN_IF_ERROR(cuda_status(cudaGetLastError(), "unfused moe launch"));
  LOWBIT_RETURN_IF_ERROR(fp8_grouped_gemm(static_cast<Fp8GroupedProblem*>(problems_.p), s.experts, OutType::kFP32,
                                          grouped_ws_.p, grouped_ws_bytes_, st));
  LOWBIT_RETURN_IF_ERROR(cuda_status(cudaMemsetAsync(a.y, 0, static_cast<size_t>(s.m) * s.n * 4, st), "memset"));
  const int64_t quads = static_cast<int64_t>(pairs) * (s.n / 4);
  scatter_kernel<<<static_cast<unsigned>((quads + 255) / 256), 256, 0, st>>>(
      static_cast<int*>(pair_row_.p), weights, static_cast<float*>(d_rows_.p), pairs, s.top_k, s.n,
      static_cast<float*>(a.y));
  return cuda_status(cudaGetLastError(), "unfused moe launch");
}

}  // namespace lowbit::bench
