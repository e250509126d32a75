// Dynamic shared memory, device side: the single place that aligns it for the kernels'
// SharedStorage structs (the 128B TMA swizzle atom needs 1024-byte alignment; kernels request
// sizeof(SharedStorage) + 1024 bytes).
#pragma once

#include <cstdint>

namespace lowbit::hopper {

template <class Storage>
__device__ __forceinline__ Storage& aligned_shared_storage(uint8_t* smem_raw) {
  const uint32_t pad = (1024u - static_cast<uint32_t>(reinterpret_cast<uintptr_t>(smem_raw) % 1024u)) % 1024u;
  return *reinterpret_cast<Storage*>(smem_raw + pad);
}

// The same, with the address kept in a register: under register pressure ptxas otherwise
// rebuilds it from the shared-window special registers (S2UR, tens of cycles) in front of every
// barrier wait of the mainloop. The empty asm only hides the value from the optimizer; it emits
// no instruction.
template <class Storage>
__device__ __forceinline__ Storage& pinned_shared_storage(uint8_t* smem_raw) {
  Storage* p = &aligned_shared_storage<Storage>(smem_raw);
  asm volatile("" : "+l"(p));
  return *p;
}

// 8 bytes from shared memory through a pointer whose address space the compiler may have lost
// (pinned_shared_storage hides it): an explicit ld.shared instead of a generic LD.
__device__ __forceinline__ uint2 ld_shared_u32x2(const void* smem_ptr) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem_ptr));
  uint2 v;
  asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "r"(addr) : "memory");
  return v;
}

// 4 bytes, the same way (the block-scaled A scales of a stage, gemm/blockscaled/mainloop.cuh).
__device__ __forceinline__ float ld_shared_f32(const void* smem_ptr) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem_ptr));
  float v;
  asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(v) : "r"(addr) : "memory");
  return v;
}

// 16 bytes, the same way (the split-K landing slots, gemm/core/split_k.cuh).
__device__ __forceinline__ float4 ld_shared_f32x4(const void* smem_ptr) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem_ptr));
  float4 v;
  asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}

}  // namespace lowbit::hopper
