#include "hopper/tensor_map.h"

#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <cstring>
#include <memory>
#include <string>

#include "common/driver_entry.h"

namespace lowbit::hopper {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 encode_fn(Status* status) {
  static const auto fn = driver_entry<PFN_cuTensorMapEncodeTiled_v12000>("cuTensorMapEncodeTiled", 12000);
  *status = fn ? Status::Ok()
               : Status::Error(StatusCode::kCudaError, "cuTensorMapEncodeTiled is not available from the driver");
  return fn;
}

CUtensorMapSwizzle to_cu(TmaSwizzle s) {
  switch (s) {
    case TmaSwizzle::kNone: return CU_TENSOR_MAP_SWIZZLE_NONE;
    case TmaSwizzle::k32B: return CU_TENSOR_MAP_SWIZZLE_32B;
    case TmaSwizzle::k64B: return CU_TENSOR_MAP_SWIZZLE_64B;
    case TmaSwizzle::k128B: return CU_TENSOR_MAP_SWIZZLE_128B;
  }
  return CU_TENSOR_MAP_SWIZZLE_NONE;
}

}  // namespace

Status encode_tensor_map_2d(const TensorMap2dSpec& spec, CUtensorMap* out) {
  Status st;
  auto fn = encode_fn(&st);
  if (!st.ok()) return st;
  if (spec.base == nullptr) return Status::Invalid("tensor map: null base pointer");
  if (reinterpret_cast<uintptr_t>(spec.base) % 16 != 0)
    return Status::Invalid("tensor map: base pointer must be 16-byte aligned");
  if (spec.row_stride_bytes % 16 != 0)
    return Status::Invalid("tensor map: row stride must be a multiple of 16 bytes");
  const cuuint64_t dims[2] = {spec.cols, spec.rows};
  const cuuint64_t strides[1] = {spec.row_stride_bytes};
  const cuuint32_t box[2] = {spec.box_cols, spec.box_rows};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUresult r = fn(out, spec.dtype, 2, const_cast<void*>(spec.base), dims, strides, box,
                        elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, to_cu(spec.swizzle),
                        spec.l2_promotion, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    return Status::Error(StatusCode::kCudaError,
                         "cuTensorMapEncodeTiled failed with CUresult " + std::to_string(static_cast<int>(r)) +
                             " (rows=" + std::to_string(spec.rows) + ", cols=" + std::to_string(spec.cols) +
                             ", box=" + std::to_string(spec.box_rows) + "x" + std::to_string(spec.box_cols) + ")");
  return Status::Ok();
}

namespace {

// One slot: the spec's fields (compared as a plain tuple, padding excluded) and its map.
struct MapKey {
  const void* base;
  uint64_t rows, cols, row_stride_bytes;
  uint32_t box_rows, box_cols;
  int32_t dtype, elem_bytes, swizzle, l2_promotion;
  bool operator==(const MapKey& o) const {
    return base == o.base && rows == o.rows && cols == o.cols && row_stride_bytes == o.row_stride_bytes &&
           box_rows == o.box_rows && box_cols == o.box_cols && dtype == o.dtype && elem_bytes == o.elem_bytes &&
           swizzle == o.swizzle && l2_promotion == o.l2_promotion;
  }
};

MapKey key_of(const TensorMap2dSpec& s) {
  return MapKey{s.base,         s.rows,         s.cols,
                s.row_stride_bytes, s.box_rows, s.box_cols,
                static_cast<int32_t>(s.dtype), s.elem_bytes, static_cast<int32_t>(s.swizzle),
                static_cast<int32_t>(s.l2_promotion)};
}

size_t slot_of(const MapKey& k) {
  uint64_t h = reinterpret_cast<uintptr_t>(k.base) >> 4;
  for (uint64_t v : {k.rows, k.cols, k.row_stride_bytes, (uint64_t{k.box_rows} << 32) | k.box_cols,
                     (uint64_t(uint32_t(k.dtype)) << 32) | uint32_t(k.swizzle)})
    h = (h ^ v) * 0x9E3779B97F4A7C15ull;
  return static_cast<size_t>(h >> 40) % kMapCacheSlots;
}

struct MapCache {
  MapKey keys[kMapCacheSlots];
  bool used[kMapCacheSlots] = {};
  CUtensorMap maps[kMapCacheSlots];
};

}  // namespace

Status make_tensor_map_2d(const TensorMap2dSpec& spec, CUtensorMap* out) {
  // On the heap: a dlopen'ed library (the PyTorch extension) has little static TLS.
  thread_local std::unique_ptr<MapCache> cache;
  if (!cache) cache = std::make_unique<MapCache>();
  const MapKey key = key_of(spec);
  const size_t i = slot_of(key);
  if (cache->used[i] && cache->keys[i] == key) {
    std::memcpy(out, &cache->maps[i], sizeof(CUtensorMap));
    return Status::Ok();
  }
  LOWBIT_RETURN_IF_ERROR(encode_tensor_map_2d(spec, out));
  cache->keys[i] = key;
  cache->maps[i] = *out;
  cache->used[i] = true;
  return Status::Ok();
}

}  // namespace lowbit::hopper
