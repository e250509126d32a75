// 2:4 compression into the prepacked layout of formats/sparse24_layout.h, on the device (large
// weights) and on the host (tests, offline preparation). Both walk the same mapping: one thread
// (host: one iteration) per metadata word pair of a slab's K block, so each word is written
// whole and each group's values exactly once.
#include <cuda_runtime.h>

#include <climits>
#include <cstring>
#include <string>

#include "formats/sparse24_layout.h"
#include "gemm/launch_common.h"
#include "hopper/grid_dependency.cuh"
#include "lowbit/sparse.h"

namespace lowbit {
namespace {

using formats::Sparse24Type;

Sparse24Type to_format(SparseType t) { return t == SparseType::kE4M3 ? Sparse24Type::kE4M3 : Sparse24Type::kF16; }

constexpr unsigned long long kNoViolation = ~0ull;

// Reads group (row, col .. col + 3) of the dense matrix as raw bits.
template <int kElemBytes>
__host__ __device__ inline void read_group(const void* dense, int64_t k, int64_t row, int64_t col, uint32_t (&bits)[4]) {
  if constexpr (kElemBytes == 1) {
    uint32_t v;
    std::memcpy(&v, static_cast<const uint8_t*>(dense) + row * k + col, 4);
    for (int i = 0; i < 4; ++i) bits[i] = (v >> (8 * i)) & 0xFFu;
  } else {
    uint64_t v;
    std::memcpy(&v, static_cast<const uint16_t*>(dense) + row * k + col, 8);
    for (int i = 0; i < 4; ++i) bits[i] = static_cast<uint32_t>(v >> (16 * i)) & 0xFFFFu;
  }
}

template <int kElemBytes>
__host__ __device__ inline void write_pair(void* values, int64_t k, int64_t row, int64_t col, uint32_t lo, uint32_t hi) {
  // Compressed columns col/2, col/2 + 1 of [m, k/2].
  const int64_t off = row * (k / 2) + col / 2;
  if constexpr (kElemBytes == 1) {
    const uint16_t v = static_cast<uint16_t>(lo | hi << 8);
    std::memcpy(static_cast<uint8_t*>(values) + off, &v, 2);
  } else {
    const uint32_t v = lo | hi << 16;
    std::memcpy(static_cast<uint16_t*>(values) + off, &v, 4);
  }
}

// Word pair of thread t in block (slab, kb). Returns the lowest violating group index found
// (row * (k / 4) + group), or kNoViolation.
template <Sparse24Type kType>
__host__ __device__ inline unsigned long long encode_words(const void* dense, int64_t m, int64_t k, bool prune,
                                                          void* values, uint32_t* words, int64_t slab, int64_t kb,
                                                          int t) {
  constexpr int kEb = formats::sparse24_elem_bytes(kType);
  const bool owner = formats::sparse24_thread_owns(kType, t);
  unsigned long long violation = kNoViolation;
  for (int j = 0; j < 2; ++j) {
    uint32_t word = 0;
    for (int i = 0; i < 8; ++i) {
      const formats::SparseChunkPos pos = formats::sparse24_chunk_pos(kType, t, j, i);
      const int64_t row = slab * formats::kSparseSlabRows + pos.row;
      const int64_t col = kb * formats::sparse24_block_k(kType) + pos.col;
      uint32_t code = 0x4;  // padding: positions 0 and 1, no values
      if (row < m && col < k) {
        uint32_t bits[4];
        read_group<kEb>(dense, k, row, col, bits);
        int a = 0, b = 0;
        if (formats::sparse24_encode_group(bits, kType, prune, &a, &b, &code) > 2) {
          const unsigned long long g = static_cast<unsigned long long>(row * (k / 4) + col / 4);
          violation = g < violation ? g : violation;
        }
        if (owner) {
          uint32_t lo = 0, hi = 0;  // selected, not indexed: a dynamic index puts bits[] in local memory
#pragma unroll
          for (int x = 0; x < 4; ++x) {
            lo = x == a ? bits[x] : lo;
            hi = x == b ? bits[x] : hi;
          }
          write_pair<kEb>(values, k, row, col, lo, hi);
        }
      }
      word |= code << (4 * i);
    }
    words[j] = word;
  }
  return violation;
}

template <Sparse24Type kType>
__global__ void __launch_bounds__(128) sparse24_compress_kernel(const void* dense, int64_t m, int64_t k, bool prune,
                                                                void* values, uint8_t* meta, int64_t slabs,
                                                                unsigned long long* violation) {
  const int64_t block = blockIdx.x;  // = kb * slabs + slab
  const int64_t slab = block % slabs;
  const int64_t kb = block / slabs;
  const int t = static_cast<int>(threadIdx.x);
  uint32_t words[2];
  const unsigned long long v = encode_words<kType>(dense, m, k, prune, values, words, slab, kb, t);
  *reinterpret_cast<uint2*>(meta + block * formats::kSparseMetaBlockBytes + 8 * t) = make_uint2(words[0], words[1]);
  if (v != kNoViolation && violation) atomicMin(violation, v);
}

// Device buffers are read by TMA-fed kernels and must be 16-byte aligned; host ones need not be.
check::ArgCheck& validate(check::ArgCheck& c, const void* dense, int64_t m, int64_t k, SparseType type,
                          const void* values, const void* meta, bool device) {
  const size_t align = device ? 16 : 1;
  const int64_t eb = type == SparseType::kF16 ? 2 : 1;
  return c.dim("M", m, 1, INT_MAX)
      .dim("K", k, 32, INT_MAX)
      .rule(type != SparseType::kE4M3 && type != SparseType::kF16, [] { return std::string("unknown element type"); })
      .ptr("dense", dense, align, check::Null::kRefused, check::extent(m, k, eb))
      .out("values", const_cast<void*>(values), align, check::extent(m, k / 2, eb))
      .out("meta", const_cast<void*>(meta), align, check::extent_of(sparse24_meta_bytes(m, k, type)));
}

Status violation_error(const char* who, int64_t index, int64_t k) {
  const int64_t row = index / (k / 4), group = index % (k / 4);
  return Status::Invalid(std::string(who) + ": A is not 2:4 sparse: row " + std::to_string(row) + ", columns " +
                         std::to_string(4 * group) + ".." + std::to_string(4 * group + 3) +
                         " hold more than 2 nonzeros (first violating group)");
}

}  // namespace

Status sparse24_compress(const void* dense, int64_t m, int64_t k, SparseType type, bool prune, void* values, void* meta,
                         int64_t* violation, cudaStream_t stream) {
  // A host buffer passed here by mistake (the host compressor takes the same arguments) would
  // fault in the kernel and leave the context unusable: the pointer kinds are checked too.
  check::ArgCheck c("sparse24_compress");
  validate(c, dense, m, k, type, values, meta, /*device=*/true)
      .rule(!violation && !prune,
            [] { return std::string("violation must be non-null unless pruning (it reports non-2:4 input)"); })
      .out("violation", violation, 8, 8, check::Null::kAllowed);
  LOWBIT_RETURN_IF_ERROR(c.device());
  const Sparse24Type ft = to_format(type);
  const int64_t slabs = formats::sparse24_slabs(m);
  const int64_t blocks = slabs * formats::sparse24_k_blocks(k, ft);
  if (blocks > INT_MAX) return Status::Invalid("sparse24_compress: matrix too large");
  auto* v = reinterpret_cast<unsigned long long*>(violation);
  cudaError_t e = cudaSuccess;
  if (v) e = cudaMemsetAsync(v, 0xFF, sizeof(*v), stream);  // -1: no violation
  if (e == cudaSuccess) {
    auto* kernel = ft == Sparse24Type::kE4M3 ? &sparse24_compress_kernel<Sparse24Type::kE4M3>
                                             : &sparse24_compress_kernel<Sparse24Type::kF16>;
    e = hopper::launch_kernel(kernel, dim3(static_cast<unsigned>(blocks)), dim3(128), 0, stream, /*pdl=*/false, dense,
                              m, k, prune, values, static_cast<uint8_t*>(meta), slabs, v);
  }
  if (e != cudaSuccess) return gemm::cuda_error("sparse24_compress", e);
  return Status::Ok();
}

Status sparse24_compress_checked(const void* dense, int64_t m, int64_t k, SparseType type, void* values, void* meta,
                                 int64_t* violation, cudaStream_t stream) {
  // Its own checks first, so a refusal names this entry point (it never prunes).
  check::ArgCheck c("sparse24_compress_checked");
  validate(c, dense, m, k, type, values, meta, /*device=*/true).out("violation", violation, 8, 8);
  LOWBIT_RETURN_IF_ERROR(c.device());
  // It waits for the result, which a stream under capture cannot give: refuse before queuing
  // anything into the caller's graph.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  const cudaError_t e = cudaStreamIsCapturing(stream, &capture);
  if (e != cudaSuccess) return gemm::cuda_error("sparse24_compress_checked", e);
  if (capture != cudaStreamCaptureStatusNone)
    return Status::Invalid("sparse24_compress_checked: the stream is capturing a graph and this call waits for its "
                           "result; use sparse24_compress (and read `violation` after the graph has run)");
  LOWBIT_RETURN_IF_ERROR(sparse24_compress(dense, m, k, type, false, values, meta, violation, stream));
  int64_t host = -1;
  LOWBIT_RETURN_IF_ERROR(gemm::read_back("sparse24_compress_checked", violation, &host, sizeof(host), stream));
  if (host >= 0) return violation_error("sparse24_compress_checked", host, k);
  return Status::Ok();
}

Status sparse24_compress_host(const void* dense, int64_t m, int64_t k, SparseType type, bool prune, void* values,
                              void* meta) {
  check::ArgCheck c("sparse24_compress_host");
  LOWBIT_RETURN_IF_ERROR(validate(c, dense, m, k, type, values, meta, /*device=*/false).disjoint().status());
  const Sparse24Type ft = to_format(type);
  const int64_t slabs = formats::sparse24_slabs(m);
  const int64_t kbs = formats::sparse24_k_blocks(k, ft);
  unsigned long long violation = kNoViolation;
  for (int64_t kb = 0; kb < kbs; ++kb)
    for (int64_t slab = 0; slab < slabs; ++slab) {
      uint8_t* block = static_cast<uint8_t*>(meta) + (kb * slabs + slab) * formats::kSparseMetaBlockBytes;
      for (int t = 0; t < 128; ++t) {
        uint32_t words[2];
        const unsigned long long v =
            ft == Sparse24Type::kE4M3
                ? encode_words<Sparse24Type::kE4M3>(dense, m, k, prune, values, words, slab, kb, t)
                : encode_words<Sparse24Type::kF16>(dense, m, k, prune, values, words, slab, kb, t);
        violation = v < violation ? v : violation;
        std::memcpy(block + 8 * t, words, 8);
      }
    }
  if (violation != kNoViolation) return violation_error("sparse24_compress_host", static_cast<int64_t>(violation), k);
  return Status::Ok();
}

}  // namespace lowbit
