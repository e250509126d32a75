#include "launch_floor.h"

#include <cuda.h>

namespace lowbit::bench {
namespace {

struct alignas(16) ParamBlock {
  unsigned char bytes[512];
};

__global__ void empty_like_gemm(const __grid_constant__ CUtensorMap, const __grid_constant__ CUtensorMap,
                                const __grid_constant__ CUtensorMap, const __grid_constant__ CUtensorMap,
                                const ParamBlock) {}
__global__ void empty_maps_only(const __grid_constant__ CUtensorMap, const __grid_constant__ CUtensorMap,
                                const __grid_constant__ CUtensorMap, const __grid_constant__ CUtensorMap) {}
__global__ void empty_one_pointer(const void*) {}

}  // namespace

cudaError_t launch_empty_like_gemm(cudaStream_t stream) {
  static const CUtensorMap map{};
  static const ParamBlock block{};
  empty_like_gemm<<<132, 384, 0, stream>>>(map, map, map, map, block);
  return cudaGetLastError();
}

cudaError_t launch_empty_maps_only(cudaStream_t stream) {
  static const CUtensorMap map{};
  empty_maps_only<<<132, 384, 0, stream>>>(map, map, map, map);
  return cudaGetLastError();
}

cudaError_t launch_empty_one_pointer(cudaStream_t stream) {
  empty_one_pointer<<<132, 384, 0, stream>>>(nullptr);
  return cudaGetLastError();
}

}  // namespace lowbit::bench
