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

}  // namespace lowbit::hopper
