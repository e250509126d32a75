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

// The same load with an L2 eviction policy (hopper/cache_policy.cuh). cuda::ptx has no
// .L2::cache_hint form of the tensor copy.
__device__ __forceinline__ void tma_load_2d_hinted(void* smem_dst, const CUtensorMap* map, uint64_t* bar,
                                                   int32_t inner, int32_t outer, uint64_t l2_policy) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(static_cast<uint32_t>(__cvta_generic_to_shared(smem_dst))),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(inner), "r"(outer),
      "r"(static_cast<uint32_t>(__cvta_generic_to_shared(bar))), "l"(l2_policy)
      : "memory");
}

// 2-D tile load multicast to every CTA in `cta_mask` of the cluster: the box lands at the same
// shared-memory offset in each and completes `bytes` on the barrier at `bar`'s offset in each.
__device__ __forceinline__ void tma_load_2d_multicast(void* smem_dst, const CUtensorMap* map, uint64_t* bar,
                                                      int32_t inner, int32_t outer, uint16_t cta_mask) {
  const int32_t coords[2] = {inner, outer};
  cuda::ptx::cp_async_bulk_tensor(cuda::ptx::space_cluster, cuda::ptx::space_global, smem_dst, map, coords, bar,
                                  cta_mask);
}

// Asks L2 to fetch [src, src + bytes) from global memory ahead of its readers (16-byte aligned,
// a multiple of 16 bytes); nothing completes and nothing waits. CCCL's cuda::ptx has no wrapper
// for cp.async.bulk.prefetch.L2.
__device__ __forceinline__ void bulk_prefetch_l2(const void* src, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(reinterpret_cast<uint64_t>(src)), "r"(bytes)
               : "memory");
}

// Plain bulk copy global -> shared of `bytes` contiguous bytes (a multiple of 16; both addresses
// 16-byte aligned), completing on `bar` like a tile load. For data no tensor map describes, such
// as rows gathered by an index.
__device__ __forceinline__ void bulk_load(void* smem_dst, const void* gmem_src, uint32_t bytes, uint64_t* bar) {
  cuda::ptx::cp_async_bulk(cuda::ptx::space_cluster, cuda::ptx::space_global, smem_dst, gmem_src, bytes, bar);
}

// 2-D tile store shared -> global, issued only where `issue` holds; the hardware clips the box
// at the tensor's edges. A predicated instruction rather than a branch: code that runs while a
// wgmma group is in flight must not diverge per lane, or ptxas serializes every wgmma of the
// kernel (C7518). cuda::ptx has no predicated form.
__device__ __forceinline__ void tma_store_2d_if(bool issue, const CUtensorMap* map, const void* smem_src,
                                                int32_t inner, int32_t outer) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %0, 0;\n"
      "@p cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%1, {%3, %4}], [%2];\n"
      "}\n" ::"r"(static_cast<int>(issue)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(static_cast<uint32_t>(__cvta_generic_to_shared(smem_src))),
      "r"(inner), "r"(outer)
      : "memory");
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

// ---- Tensor maps patched on the device (grouped GEMMs build one per group from a host-encoded
// template, so no host work per call). The writes go through the generic proxy; the TMA unit
// reads maps through the tensormap proxy, hence the release / acquire pair.

// Copies `tmpl` to `dst` (global memory, 64-byte aligned) and points it at a 2-D tensor of
// rows x cols elements with the given row pitch; box, swizzle and data type stay the template's.
__device__ __forceinline__ void tensor_map_patch_2d(CUtensorMap* dst, const CUtensorMap& tmpl, const void* base,
                                                    uint32_t cols, uint32_t rows, uint64_t row_stride_bytes) {
  const uint4* src = reinterpret_cast<const uint4*>(&tmpl);
  uint4* out = reinterpret_cast<uint4*>(dst);
#pragma unroll
  for (int i = 0; i < static_cast<int>(sizeof(CUtensorMap) / 16); ++i) out[i] = src[i];
  cuda::ptx::tensormap_replace_global_address(cuda::ptx::space_global, dst, reinterpret_cast<uint64_t>(base));
  cuda::ptx::tensormap_replace_global_dim(cuda::ptx::space_global, dst, cuda::ptx::n32_t<0>{}, cols);
  cuda::ptx::tensormap_replace_global_dim(cuda::ptx::space_global, dst, cuda::ptx::n32_t<1>{}, rows);
  // Stride index 0 is the pitch of dimension 1 (dimension 0 is packed), in bytes.
  cuda::ptx::tensormap_replace_global_stride(cuda::ptx::space_global, dst, cuda::ptx::n32_t<0>{},
                                             static_cast<int64_t>(row_stride_bytes));
}

// After patching: makes this thread's tensor-map writes visible to the tensormap proxy, GPU-wide.
__device__ __forceinline__ void tensor_map_release() {
  cuda::ptx::fence_proxy_tensormap_generic(cuda::ptx::sem_release, cuda::ptx::scope_gpu);
}

// Before the first copy through a map patched elsewhere (another kernel or CTA).
__device__ __forceinline__ void tensor_map_acquire(const CUtensorMap* map) {
  cuda::ptx::fence_proxy_tensormap_generic(cuda::ptx::sem_acquire, cuda::ptx::scope_gpu, map,
                                           cuda::ptx::n32_t<128>{});
}

// Shared memory written by ordinary stores must be fenced before TMA (the async proxy) reads it.
__device__ __forceinline__ void fence_async_shared() {
  cuda::ptx::fence_proxy_async(cuda::ptx::space_shared);
}

}  // namespace lowbit::hopper
