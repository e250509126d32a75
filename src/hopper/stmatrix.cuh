// stmatrix / ldmatrix: the single home for the matrix-fragment shared-memory family in lowbit.
// stmatrix writes four 8x8 16-bit matrices from the mma fragment layout, which is exactly how a
// wgmma accumulator holds 16 rows x 16 columns per warp, so an epilogue stages a tile in one
// instruction per 16x16; ldmatrix reads 16-bit operands back into that same layout (an
// epilogue's row-broadcast tile lands beside the accumulator it is added to).
#pragma once

#include <cstdint>

namespace lowbit::hopper {

// Lane l supplies the address of row (l % 8) of matrix (l / 8); register j of every lane
// holds its two elements of matrix j.
__device__ __forceinline__ void stmatrix_x4(void* smem_row_ptr, uint32_t r0, uint32_t r1,
                                            uint32_t r2, uint32_t r3) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem_row_ptr));
  asm volatile("stmatrix.sync.aligned.x4.m8n8.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr),
               "r"(r0), "r"(r1), "r"(r2), "r"(r3)
               : "memory");
}

// The same four matrices, each stored transposed: row r of matrix j (at the address lane
// 8j + r supplies) receives column r of the fragment, i.e. element (r, c) of the stored matrix is
// fragment element (c, r). An accumulator tile lands in shared memory column-major this way.
__device__ __forceinline__ void stmatrix_x4_trans(void* smem_row_ptr, uint32_t r0, uint32_t r1, uint32_t r2,
                                                  uint32_t r3) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem_row_ptr));
  asm volatile("stmatrix.sync.aligned.x4.trans.m8n8.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr),
               "r"(r0), "r"(r1), "r"(r2), "r"(r3)
               : "memory");
}

// The inverse of stmatrix_x4 with the same addresses: register j of every lane receives its two
// elements of matrix j.
__device__ __forceinline__ void ldmatrix_x4(const void* smem_row_ptr, uint32_t& r0, uint32_t& r1, uint32_t& r2,
                                            uint32_t& r3) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem_row_ptr));
  asm volatile("ldmatrix.sync.aligned.x4.m8n8.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr)
               : "memory");
}

}  // namespace lowbit::hopper
