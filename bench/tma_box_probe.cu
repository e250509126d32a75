// What one TMA copy costs the SM that issues it, by box shape, swizzle and count (docs/perf.md
// block-scaled v21): a ring of `depth` stages, each filled with the 64-row tile's A and B boxes
// (128-byte swizzle, as the 64 x 64 block-scaled kernel loads them), plus an extra copy every `every`
// stages whose kind is the case under test. One thread per CTA issues and waits, with no consumer
// work. Its loop sets a pace of its own below the real kernels' (v21), so only the differences
// between cases are the copies' costs. The operands stay in L2 after the first pass.
//   tma_box_probe [ctas=1] [depth=12] [stages=2048]
// Prints cycles per stage for each case against the tiles alone in the same mode.
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "hopper/mbarrier.cuh"
#include "hopper/tma.cuh"

namespace {

enum Extra : int {
  kNone = 0,         // tiles only
  kScalesFlat = 1,   // the scales as lowbit loads them: a 2-D fp32 box, 4 K blocks x 64 rows, no swizzle (1 KB)
  kScalesSwz = 2,    // the same 1 KB as a 3-D fp32 box, 32 floats x 2 halves x 4 K blocks, 128-byte swizzle
  kScalesRow = 3,    // one K block's 64 floats, no swizzle (256 B), DeepGEMM's per-stage copy
  kBulk = 4,         // four 1-D bulk copies of 256 B (no tensor map)
  kFp8Swz = 5,       // 1 KB of FP8, 8 rows x 128 B, 128-byte swizzle (same bytes, the tiles' layout)
  kScalesSwz2d = 6,  // the same 1 KB as two 2-D fp32 boxes of 32 floats x 4 K blocks, 128-byte swizzle (a
                     // map over M floats exactly, so rows past M are zero fill: no 3-D view past the row)
};
const char* kNames[] = {"tiles only", "scales 2-D 4x64 fp32, no swizzle", "scales 3-D 32x2x4 fp32, 128B swizzle",
                        "scales 1x64 fp32 each stage", "four 256 B bulk copies", "1 KB FP8 8x128, 128B swizzle",
                        "scales two 2-D 32x4 fp32, 128B swizzle"};

constexpr int kMaxDepth = 12;
constexpr int kTileBytes = 64 * 128;  // A (and B) box of the 64 x 64 tile: 64 rows x 128 K bytes

struct alignas(1024) Smem {
  uint8_t a[kMaxDepth][kTileBytes];
  uint8_t b[kMaxDepth][kTileBytes];
  alignas(1024) uint8_t x[kMaxDepth][1024];
  uint64_t full[kMaxDepth];
};

// Modes, a bit mask over any case:
// - kArmAfter arms the barrier after the stage's copies are issued (DeepGEMM's order) instead of before;
// - kAOnly leaves B out: one tile copy per stage, to split a copy's cost from its bytes;
// - kPairs loads the tiles of two K blocks as one 3-D copy each (128 B x 64 rows x 2 K blocks, landing in
//   two adjacent slots), every other stage: half as many tile copies for the same bytes.
enum Mode : int { kPlain = 0, kArmAfter = 1, kAOnly = 2, kPairs = 4 };

// tm_x: the case's map (every kind but the bulk copies, which read `scales` directly). tm_a3 / tm_b3: the
// tiles' 3-D views for kPairs.
__global__ void probe(const __grid_constant__ CUtensorMap tm_a, const __grid_constant__ CUtensorMap tm_b,
                      const __grid_constant__ CUtensorMap tm_x, const __grid_constant__ CUtensorMap tm_a3,
                      const __grid_constant__ CUtensorMap tm_b3, const float* scales, int kind, int mode, int every,
                      int depth, int stages, int k_blocks, long long* cycles) {
  extern __shared__ uint8_t raw[];
  Smem& s = *reinterpret_cast<Smem*>((reinterpret_cast<uintptr_t>(raw) + 1023) & ~uintptr_t(1023));
  if (threadIdx.x != 0) return;
  for (int i = 0; i < depth; ++i) lowbit::hopper::mbarrier_init(&s.full[i], 1);
  lowbit::hopper::mbarrier_init_fence();
  const int row = static_cast<int>(blockIdx.x % 2) * 64, b_row = static_cast<int>(blockIdx.x) * 64;
  const bool arm_after = (mode & kArmAfter) != 0, a_only = (mode & kAOnly) != 0, pairs = (mode & kPairs) != 0;
  // Counters, not divisions: the stage loop is one thread's dependent chain, and a runtime % and / per
  // stage would time the probe's own index arithmetic rather than the copies (docs/perf.md block-scaled
  // v21).
  int st = 0, kb = 0, wait_st = 0, since_extra = 0;
  uint32_t wait_phase = 0;
  const long long t0 = clock64();
  for (int i = 0; i < stages + depth; ++i) {
    if (i >= depth) {  // the stage issued depth fills ago must have landed before its slot is reused
      lowbit::hopper::mbarrier_wait(&s.full[wait_st], wait_phase);
      if (++wait_st == depth) {
        wait_st = 0;
        wait_phase ^= 1u;
      }
    }
    if (i >= stages) continue;
    const bool extra = kind != kNone && since_extra == 0;
    if (++since_extra == every) since_extra = 0;
    const uint32_t xbytes = !extra ? 0u : kind == kScalesRow ? 256u : 1024u;
    // kPairs: the even stage's copies carry both stages' tiles; the odd stage only arrives.
    const bool even = (i & 1) == 0;
    const uint32_t tile_bytes = pairs ? (even ? 4u * kTileBytes : 0u) : (a_only ? 1u : 2u) * kTileBytes;
    uint64_t* bar = &s.full[st];
    if (!arm_after) lowbit::hopper::mbarrier_arrive_expect_tx(bar, tile_bytes + xbytes);
    if (pairs) {
      if (even) {
        lowbit::hopper::tma_load_3d(s.a[st], &tm_a3, bar, 0, row, kb);
        lowbit::hopper::tma_load_3d(s.b[st], &tm_b3, bar, 0, b_row, kb);
      }
    } else {
      lowbit::hopper::tma_load_2d(s.a[st], &tm_a, bar, kb * 128, row);
    }
    if (extra) {
      const int g = kb & ~3;  // the group of four K blocks
      if (kind == kScalesFlat) {
        lowbit::hopper::tma_load_2d(s.x[st], &tm_x, bar, row, g);
      } else if (kind == kScalesSwz) {
        lowbit::hopper::tma_load_3d(s.x[st], &tm_x, bar, 0, row / 32, g);
      } else if (kind == kScalesRow) {
        lowbit::hopper::tma_load_2d(s.x[st], &tm_x, bar, row, kb);
      } else if (kind == kBulk) {
        for (int r = 0; r < 4; ++r)
          lowbit::hopper::bulk_load(s.x[st] + 256 * r, scales + static_cast<int64_t>(g + r) * 128 + row, 256, bar);
      } else if (kind == kFp8Swz) {
        lowbit::hopper::tma_load_2d(s.x[st], &tm_x, bar, 0, kb * 8);
      } else if (kind == kScalesSwz2d) {
        lowbit::hopper::tma_load_2d(s.x[st], &tm_x, bar, row, g);
        lowbit::hopper::tma_load_2d(s.x[st] + 512, &tm_x, bar, row + 32, g);
      }
    }
    if (!pairs && !a_only) lowbit::hopper::tma_load_2d(s.b[st], &tm_b, bar, kb * 128, b_row);
    if (arm_after) lowbit::hopper::mbarrier_arrive_expect_tx(bar, tile_bytes + xbytes);
    if (++st == depth) st = 0;
    if (++kb == k_blocks) kb = 0;
  }
  cycles[blockIdx.x] = clock64() - t0;
}

using EncodeFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                              const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                              CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

EncodeFn encoder() {
  // The probe's 3-D map has no spec in hopper/tensor_map.h (2-D only), so it asks the driver itself.
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q{};
  if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess || !fn) {
    std::fprintf(stderr, "no cuTensorMapEncodeTiled\n");
    std::exit(1);
  }
  return reinterpret_cast<EncodeFn>(fn);
}

CUtensorMap encode(EncodeFn f, CUtensorMapDataType dt, int rank, void* base, std::vector<cuuint64_t> dims,
                   std::vector<cuuint64_t> strides, std::vector<cuuint32_t> box, CUtensorMapSwizzle swz) {
  CUtensorMap m;
  std::vector<cuuint32_t> es(rank, 1);
  const CUresult r = f(&m, dt, rank, base, dims.data(), strides.data(), box.data(), es.data(),
                       CU_TENSOR_MAP_INTERLEAVE_NONE, swz, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                       CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::fprintf(stderr, "encode failed (%d), rank %d\n", static_cast<int>(r), rank);
    std::exit(1);
  }
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  const int ctas = argc > 1 ? std::atoi(argv[1]) : 1;
  const int depth = argc > 2 ? std::atoi(argv[2]) : 12;
  const int stages = argc > 3 ? std::atoi(argv[3]) : 2048;
  if (depth < 2 || depth > kMaxDepth || depth % 2 != 0 || ctas < 1 || stages < 2 || stages % 2 != 0) {
    std::fprintf(stderr, "usage: tma_box_probe [ctas >= 1] [depth: even, 2..%d] [stages: even]\n", kMaxDepth);
    return 2;
  }
  int dev_count = 0;
  if (cudaGetDeviceCount(&dev_count) != cudaSuccess || dev_count == 0) {
    std::printf("tma_box_probe needs a Hopper GPU; nothing was measured\n");
    return 1;
  }
  const int k_blocks = 56;  // K = 7168
  uint8_t *a = nullptr, *b = nullptr, *f8 = nullptr;
  float* sc = nullptr;
  long long* cyc = nullptr;
  if (cudaMalloc(&a, 128ull * k_blocks * 128) != cudaSuccess || cudaMalloc(&b, 64ull * ctas * k_blocks * 128) != cudaSuccess ||
      cudaMalloc(&f8, 512ull * 128) != cudaSuccess || cudaMalloc(&sc, k_blocks * 128 * sizeof(float)) != cudaSuccess ||
      cudaMalloc(&cyc, ctas * sizeof(long long)) != cudaSuccess) {
    std::fprintf(stderr, "tma_box_probe: cudaMalloc failed\n");
    return 1;
  }
  cudaMemset(a, 1, 128ull * k_blocks * 128);
  cudaMemset(b, 1, 64ull * ctas * k_blocks * 128);
  cudaMemset(f8, 1, 512ull * 128);
  cudaMemset(sc, 0, k_blocks * 128 * sizeof(float));
  EncodeFn f = encoder();
  const cuuint64_t kbytes = k_blocks * 128ull;
  CUtensorMap tm_a = encode(f, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, a, {kbytes, 128}, {kbytes}, {128, 64},
                            CU_TENSOR_MAP_SWIZZLE_128B);
  CUtensorMap tm_b = encode(f, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, b, {kbytes, 64ull * ctas}, {kbytes}, {128, 64},
                            CU_TENSOR_MAP_SWIZZLE_128B);
  // The A scales of M = 128 rows: [k_blocks, 128] floats.
  CUtensorMap tm_flat4 = encode(f, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, sc, {128, (cuuint64_t)k_blocks}, {512},
                                {64, 4}, CU_TENSOR_MAP_SWIZZLE_NONE);
  CUtensorMap tm_flat1 = encode(f, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, sc, {128, (cuuint64_t)k_blocks}, {512},
                                {64, 1}, CU_TENSOR_MAP_SWIZZLE_NONE);
  CUtensorMap tm_swz = encode(f, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 3, sc, {32, 4, (cuuint64_t)k_blocks}, {128, 512},
                              {32, 2, 4}, CU_TENSOR_MAP_SWIZZLE_128B);
  CUtensorMap tm_swz2d = encode(f, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, sc, {128, (cuuint64_t)k_blocks}, {512},
                                 {32, 4}, CU_TENSOR_MAP_SWIZZLE_128B);
  // The tiles' 3-D views for kPairs: 128 B of K x rows x K blocks (the K block's stride is its 128 B).
  CUtensorMap tm_a3 = encode(f, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, a, {128, 128, (cuuint64_t)k_blocks}, {kbytes, 128},
                             {128, 64, 2}, CU_TENSOR_MAP_SWIZZLE_128B);
  CUtensorMap tm_b3 = encode(f, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, b, {128, 64ull * ctas, (cuuint64_t)k_blocks},
                             {kbytes, 128}, {128, 64, 2}, CU_TENSOR_MAP_SWIZZLE_128B);
  CUtensorMap tm_fp8 = encode(f, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, f8, {128, 512}, {128}, {128, 8},
                              CU_TENSOR_MAP_SWIZZLE_128B);
  const int smem = static_cast<int>(sizeof(Smem)) + 1024;
  cudaFuncSetAttribute(probe, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  std::printf("tma_box_probe: %d CTAs, ring of %d, %d stages of 2 x 8 KB tiles (64 x 64 block-scaled loads)\n", ctas,
              depth, stages);
  std::vector<long long> host(ctas);
  double ref = 0;
  // The case's map, by kind (tiles only and the bulk copies take none: A's stands in).
  const CUtensorMap* maps[] = {&tm_a, &tm_flat4, &tm_swz, &tm_flat1, &tm_a, &tm_fp8, &tm_swz2d};
  struct Case {
    int kind, mode;
  };
  // Every extra in today's order, then the tiles, the scales' group copy and DeepGEMM's per-stage row in each
  // mode (each against the tiles of the same mode).
  std::vector<Case> cases;
  for (int kind = kNone; kind <= kScalesSwz2d; ++kind) cases.push_back({kind, kPlain});
  for (int mode : {1, 2, 3, 4, 5})  // kArmAfter, kAOnly, both, kPairs, kPairs | kArmAfter
    for (int kind : {kNone, kScalesFlat, kScalesRow}) cases.push_back({kind, mode});
  const char* kModeNames[] = {"", " +arm after", " A only", " A only +arm after", " pairs", " pairs +arm after"};
  for (const Case& c : cases) {
    const int every = c.kind == kScalesRow ? 1 : 4;
    double best = 1e30;
    for (int rep = 0; rep < 3; ++rep) {
      probe<<<ctas, 128, smem>>>(tm_a, tm_b, *maps[c.kind], tm_a3, tm_b3, sc, c.kind, c.mode, every, depth, stages, k_blocks, cyc);
      if (cudaDeviceSynchronize() != cudaSuccess) {
        std::printf("%s%s failed: %s\n", kNames[c.kind], kModeNames[c.mode], cudaGetErrorString(cudaGetLastError()));
        return 1;
      }
      cudaMemcpy(host.data(), cyc, ctas * sizeof(long long), cudaMemcpyDeviceToHost);
      double mean = 0;
      for (long long v : host) mean += static_cast<double>(v);
      mean /= ctas;
      if (mean < best) best = mean;
    }
    const double per = best / stages;
    if (c.kind == kNone) ref = per;
    char name[96];
    std::snprintf(name, sizeof(name), "%s%s", kNames[c.kind], kModeNames[c.mode]);
    std::printf("%-48s %8.1f cycles per stage  (+%6.1f; per extra copy %7.1f)\n", name, per, per - ref,
                (per - ref) * (c.kind == kScalesRow ? 1 : 4));
  }
  return 0;
}
