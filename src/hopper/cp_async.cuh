// cp.async: the per-thread asynchronous global -> shared copy (16 or 4 bytes), and the
// mbarrier arrival that completes once a thread's earlier copies have landed. The single home
// for the cp.async family in lowbit (the bulk and tensor copies live in hopper/tma.cuh).
// Unlike a bulk copy it goes through the load/store units, not the TMA unit, so many small
// pieces (a row-broadcast tile gathered row by row) do not queue ahead of the mainloop's TMA
// loads.
#pragma once

#include <cuda/ptx>

#include <cstdint>

namespace lowbit::hopper {

// 16 bytes; both addresses 16-byte aligned. .cg: cached in L2 only (the source is re-read by
// other SMs, not by this one soon).
__device__ __forceinline__ void cp_async_16(void* smem_dst, const void* gmem_src) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem_src) : "memory");
}

// 4 bytes (a scalar gathered per stage); both addresses 4-byte aligned. .ca: .cg takes 16 bytes only.
__device__ __forceinline__ void cp_async_4(void* smem_dst, const void* gmem_src) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(gmem_src) : "memory");
}

// The same copies, zero-filling the destination instead where `valid` is false (src-size 0: no
// byte of `gmem_src` is read, but it must still be a global address). For rows gathered into a
// stage where some rows have no source (a tile's rows past its group).
__device__ __forceinline__ void cp_async_16_zfill(void* smem_dst, const void* gmem_src, bool valid) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem_src), "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_4_zfill(void* smem_dst, const void* gmem_src, bool valid) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(gmem_src), "r"(valid ? 4 : 0)
               : "memory");
}

// Arrives on `bar` once every cp.async this thread issued before has completed. .noinc: the
// arrival counts against the barrier's expected count (init it with one per arriving thread).
__device__ __forceinline__ void cp_async_arrive_noinc(uint64_t* bar) { cuda::ptx::cp_async_mbarrier_arrive_noinc(bar); }

}  // namespace lowbit::hopper
