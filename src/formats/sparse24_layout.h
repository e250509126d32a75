// The prepacked 2:4-sparse A that lowbit's sparse GEMM reads (host and device code share it).
//
// Values: [M, K/2] row-major, the two kept elements of every group of 4 along K in index order
// (group c -> columns 2c, 2c+1): TMA loads it like a dense A of width K/2.
//
// Metadata: one 4-bit code per group, (second index << 2) | first index, first < second, so
// codes are 0x4, 0x8, 0x9, 0xC, 0xD, 0xE (PTX leaves equal-index codes undefined: a group with
// fewer than two nonzeros still names two distinct positions, the extra one holding a zero).
// The codes are prepacked in the order wgmma.mma_async.sp wants them in registers, so the
// mainloop does no index arithmetic: for every 64-row slab of A and every K block (128 logical
// columns for E4M3, 64 for F16 -- one 128-byte row of B either way) there is one 1 KiB block
// in which thread t of the consumer warpgroup finds its two 32-bit metadata words (one per
// sparse wgmma of the K block) at bytes [8t, 8t + 8). Blocks are ordered slab-fastest:
// block (slab, kb) starts at (kb * slabs + slab) * 1024, with slabs = M rounded up to 128, / 64,
// so the two slabs of a 128-row tile are one contiguous 2 KiB copy. Rows past M and columns
// past K (K blocks are padded to an even count) are padding (code 0x4, no values).
//
// Register mapping (PTX ISA "Matrix fragments for sparse wgmma"; docs/notes/wgmma_sp_metadata.md):
// thread t = 32w + 4g + q, word j, nibble i (bits 4i..4i+3)
//  - E4M3 (m64nNk64, sparsity selector 0: all threads): row 16w + g + 8(q & 1), group at
//    logical column 64j + 32(q >> 1) + 4i of the K block.
//  - F16 (m64nNk32, selector 0: threads q = 0, 1 supply it; q = 2, 3 carry copies): row
//    16w + g + 8(i >> 2), group at logical column 32j + 16(q & 1) + 4(i & 3).
#pragma once

#include <cstdint>

namespace lowbit::formats {

enum class Sparse24Type { kE4M3 = 0, kF16 = 1 };

constexpr int kSparseMetaBlockBytes = 1024;  // one 64-row slab x one K block
constexpr int kSparseSlabRows = 64;
constexpr int kSparseTileRows = 128;  // the GEMM's tile height: slabs are padded to pairs

__host__ __device__ constexpr int sparse24_elem_bytes(Sparse24Type t) { return t == Sparse24Type::kE4M3 ? 1 : 2; }
// Logical K columns per K block: one 128-byte row of dense B.
__host__ __device__ constexpr int sparse24_block_k(Sparse24Type t) { return 128 / sparse24_elem_bytes(t); }

__host__ __device__ constexpr int64_t sparse24_slabs(int64_t m) {
  return (m + kSparseTileRows - 1) / kSparseTileRows * (kSparseTileRows / kSparseSlabRows);
}
// K blocks of the metadata: rounded up to an even count, because the GEMM accumulates K blocks
// in pairs (gemm/sparse/operands.cuh); a padding block holds only 0x4 codes.
__host__ __device__ constexpr int64_t sparse24_k_blocks(int64_t k, Sparse24Type t) {
  return (k + 2 * sparse24_block_k(t) - 1) / (2 * sparse24_block_k(t)) * 2;
}
__host__ __device__ constexpr int64_t sparse24_meta_bytes(int64_t m, int64_t k, Sparse24Type t) {
  return sparse24_slabs(m) * sparse24_k_blocks(k, t) * kSparseMetaBlockBytes;
}

// Where nibble i of word j of thread t (of a slab's block) points: row within the slab and
// logical column within the K block of its group's first element.
struct SparseChunkPos {
  int row;
  int col;
};
__host__ __device__ inline SparseChunkPos sparse24_chunk_pos(Sparse24Type type, int t, int j, int i) {
  const int w = t / 32, g = (t % 32) / 4, q = t % 4;
  if (type == Sparse24Type::kE4M3) return {16 * w + g + 8 * (q & 1), 64 * j + 32 * (q >> 1) + 4 * i};
  return {16 * w + g + 8 * (i >> 2), 32 * j + 16 * (q & 1) + 4 * (i & 3)};
}
// Whether thread t's words are the ones the hardware reads (F16: the other pair holds copies).
__host__ __device__ inline bool sparse24_thread_owns(Sparse24Type type, int t) {
  return type == Sparse24Type::kE4M3 || (t % 4) < 2;
}

// The magnitude bits of an E4M3 byte or an F16 half: for both formats, ordering them as
// integers orders the magnitudes, and zero (either sign) is 0. Every NaN ranks alike, above
// infinity (E4M3's NaNs already share 0x7F; F16 NaN payloads differ and are folded to one), so
// ties among NaNs go to the lower index as in the float pruner (formats::prune_2_4).
__host__ __device__ inline uint32_t sparse24_magnitude(uint32_t bits, Sparse24Type t) {
  if (t == Sparse24Type::kE4M3) return bits & 0x7Fu;
  const uint32_t mag = bits & 0x7FFFu;
  return mag > 0x7C00u ? 0x7C01u : mag;
}

// One group of 4 elements (raw bits). Returns the number of nonzeros; *code gets the metadata
// nibble and first/second the kept positions. With `prune`, the two largest magnitudes are kept
// (ties to the lower index) and the result is the count after pruning.
__host__ __device__ inline int sparse24_encode_group(const uint32_t (&bits)[4], Sparse24Type t, bool prune,
                                                     int* first, int* second, uint32_t* code) {
  uint32_t mag[4];
  int nz = 0;
  for (int i = 0; i < 4; ++i) {
    mag[i] = sparse24_magnitude(bits[i], t);
    nz += mag[i] != 0;
  }
  int a = -1, b = -1;
  if (nz > 2 && prune) {
    a = 0;
    for (int i = 1; i < 4; ++i)
      if (mag[i] > mag[a]) a = i;
    b = a == 0 ? 1 : 0;
    for (int i = 0; i < 4; ++i)
      if (i != a && mag[i] > mag[b]) b = i;
    nz = 2;
  } else {
    for (int i = 0; i < 4; ++i)
      if (mag[i] != 0) {
        if (a < 0) a = i;
        else if (b < 0) b = i;
      }
    // Fewer than two nonzeros: fill with the lowest free positions (their values are zero).
    for (int i = 0; i < 4 && b < 0; ++i)
      if (a < 0) a = i;
      else if (i != a) b = i;
  }
  if (a > b) {
    const int x = a;
    a = b;
    b = x;
  }
  *first = a;
  *second = b;
  *code = static_cast<uint32_t>(b << 2 | a);
  return nz;
}

}  // namespace lowbit::formats
