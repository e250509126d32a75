// TMA (the bulk tensor copy engine), device side: the single home for cp.async.bulk.tensor
// in lowbit, on CCCL's cuda::ptx. Tensor maps are made on the host (tensor_map.h) and passed
// to kernels by value as __grid_constant__ parameters.
#pragma once

#include <cuda.h>
#include <cuda/ptx>
#include <cstdint>

namespace lowbit::hopper {

// Pulls the 128-byte descriptor into the constant cache before the first copy needs it.
__device__ __forceinline__ void tma_prefetch_descriptor(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// 2-D tile load global -> shared, completing `bytes` on `bar`. Out-of-bounds elements arrive
// as zeros and still count toward the transaction bytes.
__device__ __forceinline__ void tma_load_2d(void* smem_dst, const CUtensorMap* map, uint64_t* bar,
                                            int32_t inner, int32_t outer) {
  const int32_t coords[2] = {inner, outer};
  cuda::ptx::cp_async_bulk_tensor(cuda::ptx::space_cluster, cuda::ptx::space_global, smem_dst, map,
                                  coords, bar);
}

// Plain bulk copy global -> shared of `bytes` contiguous bytes (a multiple of 16; both addresses
// 16-byte aligned), completing on `bar` like a tile load. For data no tensor map describes, such
// as rows gathered by an index.
__device__ __forceinline__ void bulk_load(void* smem_dst, const void* gmem_src, uint32_t bytes, uint64_t* bar) {
  cuda::ptx::cp_async_bulk(cuda::ptx::space_cluster, cuda::ptx::space_global, smem_dst, gmem_src, bytes, bar);
}

// 2-D tile store shared -> global; the hardware clips the box at the tensor's edges.
__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, const void* smem_src,
                                             int32_t inner, int32_t outer) {
  const int32_t coords[2] = {inner, outer};
  cuda::ptx::cp_async_bulk_tensor(cuda::ptx::space_global, cuda::ptx::space_shared, map, coords,
                                  smem_src);
}

__device__ __forceinline__ void tma_store_commit() { cuda::ptx::cp_async_bulk_commit_group(); }

// Waits until at most N committed stores still read their shared-memory source.
template <int N>
__device__ __forceinline__ void tma_store_wait_read() {
  cuda::ptx::cp_async_bulk_wait_group_read(cuda::ptx::n32_t<N>{});
}

// Waits until at most N committed stores are still writing global memory.
template <int N>
__device__ __forceinline__ void tma_store_wait_all() {
  cuda::ptx::cp_async_bulk_wait_group(cuda::ptx::n32_t<N>{});
}

// Shared memory written by ordinary stores must be fenced before TMA (the async proxy) reads it.
__device__ __forceinline__ void fence_async_shared() {
  cuda::ptx::fence_proxy_async(cuda::ptx::space_shared);
}

}  // namespace lowbit::hopper
