// WGMMA (warpgroup matrix multiply-accumulate, sm_90a): the single home for the wgmma PTX
// family in lowbit. CCCL's cuda::ptx does not cover wgmma, so the instructions live here and
// in the generated wgmma_ops.inc; kernels call these wrappers and never write wgmma asm.
#pragma once

#include <cstdint>

namespace lowbit::hopper {

// Shared-memory swizzle modes as the wgmma descriptor encodes them (bits 62..63).
enum class SmemSwizzle : uint32_t { kNone = 0, k128B = 1, k64B = 2, k32B = 3 };

// A wgmma shared-memory matrix descriptor (PTX ISA "Matrix Descriptor Format").
// For the K-major, 128-byte-swizzled tiles that TMA writes (rows of 128 bytes, 8-row atoms of
// 1024 bytes), the stride byte offset is the distance between 8-row atoms and the leading byte
// offset is unused. Advancing along K inside the 128-byte row is a plain add to the start
// address, which is why descriptors are built once per stage and bumped per k-step.
__device__ __forceinline__ uint64_t make_smem_desc(const void* smem_ptr, uint32_t leading_bytes,
                                                   uint32_t stride_bytes, SmemSwizzle swizzle) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem_ptr));
  uint64_t desc = 0;
  desc |= static_cast<uint64_t>((addr & 0x3FFFF) >> 4);
  desc |= static_cast<uint64_t>((leading_bytes & 0x3FFFF) >> 4) << 16;
  desc |= static_cast<uint64_t>((stride_bytes & 0x3FFFF) >> 4) << 32;
  desc |= static_cast<uint64_t>(swizzle) << 62;
  return desc;
}

// The descriptor's start address is in 16-byte units in its low 14 bits. Shared memory ends below
// 2^18 bytes, so an offset within it never carries out of the low word: a 32-bit add (a 64-bit
// one costs a carry chain per k-step in the mainloop).
__device__ __forceinline__ uint64_t advance_desc(uint64_t desc, uint32_t bytes) {
  const uint32_t lo = static_cast<uint32_t>(desc) + (bytes >> 4);
  return (desc & 0xFFFFFFFF00000000ull) | lo;
}
// The same for buffer `index` of a ring of `kBufferBytes`-byte buffers, from buffer 0's descriptor:
// one multiply-add per buffer instead of a fresh descriptor's mask and shift.
template <uint32_t kBufferBytes>
__device__ __forceinline__ uint64_t buffer_desc(uint64_t desc0, int index) {
  static_assert(kBufferBytes % 16 == 0, "descriptors address 16-byte units");
  const uint32_t lo = static_cast<uint32_t>(desc0) + static_cast<uint32_t>(index) * (kBufferBytes / 16);
  return (desc0 & 0xFFFFFFFF00000000ull) | lo;
}

// Orders prior register writes (accumulators, A fragments) before the next wgmma reads them.
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void wgmma_commit_group() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

// Waits until at most N committed wgmma groups of this warpgroup are still in flight.
template <int N>
__device__ __forceinline__ void wgmma_wait_group() {
  static_assert(N >= 0 && N <= 7, "wgmma.wait_group takes 0..7");
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// Keeps the compiler from moving reads or writes of accumulator registers across a
// wgmma issue or wait: the asynchronous unit writes them behind the compiler's back.
template <int R>
__device__ __forceinline__ void fence_operands(float (&regs)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(regs[i])::"memory");
}

// The same for other registers an in-flight wgmma reads (sparse metadata): a use after the wait
// that retires it keeps the compiler from reusing them while the MMA may still read them.
template <int R>
__device__ __forceinline__ void fence_operands(uint32_t (&regs)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+r"(regs[i])::"memory");
}

enum class WgmmaKind { kE4M3, kBF16, kF16 };

// m64nNkK, A and B from shared memory (K-major), FP32 accumulators in registers.
// Specializations for each (kind, N) are generated into wgmma_ops.inc.
template <WgmmaKind Kind, int N>
struct WgmmaOp;

// m64nNkK with a 2:4-sparse A (kK / 2 stored values per row plus one 32-bit metadata register per
// thread, sparsity selector 0): the sparse GEMM's instruction.
template <WgmmaKind Kind, int N>
struct WgmmaSpOp;

// m64nNk16 with A from registers (the four 32-bit fragment registers of each thread, laid out as
// mma.m16n8k16's A per warp: warp w holds rows 16w..16w+15) and B from shared memory, K-major.
// The A registers are read asynchronously: do not overwrite them before wgmma_wait_group says
// the MMA retired.
template <WgmmaKind Kind, int N>
struct WgmmaRegAOp;

#include "wgmma_ops.inc"

}  // namespace lowbit::hopper
