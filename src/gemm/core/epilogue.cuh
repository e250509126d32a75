// The GEMM core's epilogue: alpha, per-token and per-channel scales, a bias and (beside per-row
// scales or FP16 output) a residual, converted to BF16, FP16 or FP32 and stored with TMA (a
// family's fused epilogue -- the FP8 family's row broadcast, activation and residual,
// gemm/fp8/epilogue_fused.cuh -- is applied to the accumulators first; every variant stores here).
// Each consumer warpgroup stages its 64-row slice in 64-row chunks (128, 64 or 32 bytes wide,
// swizzled to that width so the fragment writes are bank-conflict free: EpilogueStaging), and one
// thread stores each chunk with TMA; the store runs asynchronously while the warpgroup moves on to
// the next unit's mainloop.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "gemm/core/epilogue_params.h"
#include "gemm/core/tile_scheduler.cuh"
#include "gemm/core/traits.cuh"
#include "hopper/mbarrier.cuh"
#include "hopper/named_barrier.cuh"
#include "hopper/stmatrix.cuh"
#include "hopper/tma.cuh"

namespace lowbit::gemm {

// The bias slice every unit reads, staged in shared memory. Read from global memory inside the
// epilogue it cost ~6 us per tile: a few L2 round trips under full TMA load, each waited for
// before the next was issued (docs/perf.md, W2). Here one warp of the producer warpgroup
// bulk-copies it while the consumers run the unit's mainloop, and the epilogue reads shared
// memory only. One buffer: the loader refills it for the next unit once every working consumer
// warp has read it, which leaves the whole next mainloop to land the copies.
// The overlapped kernels (T::kOverlapEpilogue) wait for the unit's slices after its mainloop,
// before the next unit's first MMAs are issued, and release them after the element math with a
// predicated arrive: with those MMAs in flight a lane's branch would make ptxas serialize the
// kernel's wgmmas (docs/perf.md W1 v20).
template <class T>
struct StagedEpilogueOperands {
  // Whether any operand is staged per unit (else nothing is loaded and nothing waits).
  __device__ __forceinline__ static bool any(const KernelParams& p) {
    return p.epi.bias != nullptr || p.epi.col_scale != nullptr;
  }

  // Absent operands read as zeros (bias) and ones (scales), so the epilogue math carries no
  // branches.
  __device__ __forceinline__ static void init(typename T::SharedStorage& ss, const KernelParams& p,
                                              int consumer_wgs) {
    if (threadIdx.x == 0) {
      hopper::mbarrier_init(&ss.ops.full, 1);
      hopper::mbarrier_init(&ss.ops.empty, consumer_wgs * 4);  // each working consumer warp
    }
    if (p.epi.bias == nullptr)
      for (int i = threadIdx.x; i < T::kBlockN; i += blockDim.x) ss.ops.bias[i] = __float2bfloat16(0.0f);
    if (p.epi.col_scale == nullptr)
      for (int i = threadIdx.x; i < T::kBlockN; i += blockDim.x) ss.ops.col_scale[i] = 1.0f;
  }

  // Called by lane 0 of the loader warp, once per unit in the consumers' order; `parity` flips
  // per unit.
  __device__ __forceinline__ static void load(typename T::SharedStorage& ss, const KernelParams& p,
                                              const WorkUnit& w, uint32_t parity) {
    hopper::mbarrier_wait(&ss.ops.empty, parity ^ 1u);  // a fresh barrier lets the first unit through
    // A 240-column tile (uneven columns) stages 256 columns where N has them: the last 16 are
    // never read.
    const int col0 = tile_col0<T>(w);
    const uint32_t cols = static_cast<uint32_t>(p.n - col0 < T::kBlockN ? p.n - col0 : T::kBlockN);
    // n % 16 == 0: both slices are whole 16-byte units.
    const uint32_t bias_bytes = p.epi.bias ? cols * 2 : 0u;
    const uint32_t scale_bytes = p.epi.col_scale ? cols * 4 : 0u;
    hopper::mbarrier_arrive_expect_tx(&ss.ops.full, bias_bytes + scale_bytes);
    if (bias_bytes) hopper::bulk_load(ss.ops.bias, p.epi.bias + col0, bias_bytes, &ss.ops.full);
    if (scale_bytes) hopper::bulk_load(ss.ops.col_scale, p.epi.col_scale + col0, scale_bytes, &ss.ops.full);
  }

  __device__ __forceinline__ static void wait(typename T::SharedStorage& ss, uint32_t parity) {
    hopper::mbarrier_wait(&ss.ops.full, parity);
  }
  // Each working consumer warp, after its last read of the staged operands. The proxy fence
  // orders those (generic-proxy) reads before the loader's next bulk copies (async proxy) write
  // the same bytes.
  __device__ __forceinline__ static void release(typename T::SharedStorage& ss) {
    hopper::fence_async_shared();
    __syncwarp();
    if constexpr (T::kOverlapEpilogue) {
      hopper::mbarrier_arrive_if(threadIdx.x % 32 == 0, &ss.ops.empty);
    } else {
      if (threadIdx.x % 32 == 0) hopper::mbarrier_arrive(&ss.ops.empty);
    }
  }
};

// The residual ([M, N] BF16) of one thread's two fragment rows, read from global memory in the
// epilogue. Rows past M and columns past N read zeros (their outputs are clipped). The fused
// epilogue adds it after the activation, two column groups per batch; the staged one after the
// scales and the bias, every load issued at once (TileEpilogue::scales_bias_residual).
struct ResidualRows {
  const __nv_bfloat16* row[2];
  int n;
  __device__ __forceinline__ ResidualRows(const EpilogueParams& e, int first_row, int m, int n_)
      : row{nullptr, nullptr}, n(n_) {
#pragma unroll
    for (int h = 0; h < 2; ++h)
      if (first_row + 8 * h < m) row[h] = e.residual + static_cast<int64_t>(first_row + 8 * h) * n_;
  }
  // Columns c, c + 1 of fragment row h (c is even; N is a multiple of 16), as loaded (two BF16)
  // and as floats.
  __device__ __forceinline__ uint32_t load_raw(int h, int c) const {
    if (row[h] == nullptr || c >= n) return 0u;  // two BF16 zeros
    return *reinterpret_cast<const uint32_t*>(row[h] + c);
  }
  __device__ __forceinline__ static float2 unpack(uint32_t v) {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v));
  }
  __device__ __forceinline__ float2 load(int h, int c) const { return unpack(load_raw(h, c)); }
};

// Accumulator fragment of m64nN (per warp w, lane l): acc[4*g + 2*h + e] is row 16w + l/4 + 8h,
// column 8g + 2(l%4) + e.
template <class T>
struct TileEpilogue {
  uint32_t round_counter = 0;  // cycles through the staging slots across every round this warpgroup stores

  __device__ __forceinline__ static hopper::NamedBarrier barrier(int consumer_wg) {
    return consumer_wg == 0 ? hopper::NamedBarrier::kEpilogueWg0 : hopper::NamedBarrier::kEpilogueWg1;
  }

  // The staged epilogue's per-token scales of this thread's two fragment rows (16w + l/4 and 8
  // below), ones where there are none. Loaded before the unit's mainloop and first used in its
  // epilogue (apply multiplies them by alpha), so the loads land under the mainloop; multiplied
  // here, they were waited for before the mainloop started (docs/perf.md W1 v20). Rows past M
  // read nothing (their outputs are clipped).
  __device__ __forceinline__ static float2 row_scales(const KernelParams& p, const WorkUnit& w,
                                                      int consumer_wg) {
    float2 s = make_float2(1.0f, 1.0f);
    if (p.epi.row_scale == nullptr) return s;
    const int t = threadIdx.x % 128;
    const int r = w.m_block * T::kBlockM + consumer_wg * 64 + (t / 32) * 16 + (t % 32) / 4;
    if (r < p.m) s.x = __ldg(p.epi.row_scale + r);
    if (r + 8 < p.m) s.y = __ldg(p.epi.row_scale + r + 8);
    return s;
  }

  // The element math, reading the staged bias and per-channel scales (StagedEpilogueOperands::wait
  // first); `token_scales` is row_scales' (staged variants; the others apply alpha alone).
  __device__ __forceinline__ static void apply(const typename T::SharedStorage& ss, int consumer_wg,
                                               const KernelParams& p, const WorkUnit& w, float alpha,
                                               float2 token_scales, float (&acc)[T::kBlockN / 2]) {
    const int lane = threadIdx.x % 32;
    const int row0 = w.m_block * T::kBlockM + consumer_wg * 64;
    // A whole warpgroup slice below the matrix (small M) computes rows that are never stored:
    // no early return (a branch on the warpgroup's rows took every non-overlapped kernel's K loop
    // off the uniform datapath, docs/perf.md block-scaled v7).
    const int tile_col = 2 * (lane % 4);
    if constexpr (T::kStaged) {
      const float2 rows = make_float2(alpha * token_scales.x, alpha * token_scales.y);
      // The residual beside per-row scales or FP16 output (the fused epilogue, which adds it
      // otherwise, has no room for the per-channel slice): one uniform branch per unit, none in
      // the overlapped kernels (which run no residual).
      if (!T::kOverlapEpilogue && p.epi.residual != nullptr)
        scales_bias_residual(ss, p, tile_col, row0 + (threadIdx.x % 128) / 32 * 16 + lane / 4,
                             tile_col0<T>(w) + tile_col, rows, acc);
      else
        apply_scales_bias(ss, tile_col, rows, acc);
    } else {
      apply_alpha(alpha, acc);
    }
    // Uneven columns: a trimmed tile (kTrim columns short) skips its last kTrim / 64 rounds, or,
    // where kTrim is not a whole round, stores its last round kTrim columns to the left, so that
    // the round's box ends at the tile's edge (its first kTrim columns are stored twice, with the
    // same values). Its fragments move kTrim / 8 fragment groups (kTrim / 2 registers) to the
    // left here, in place: the overlapped kernel, whose next unit's first MMAs are in flight
    // here (all but the last unit), has no registers to spare for a copy.
    constexpr int kTrim = UnevenColumnLayout::kTrim;
    if constexpr (UnevenColumns<T>::value && kTrim % T::kEpiRoundCols != 0) {
      constexpr int kShift = kTrim / 2;
      static_assert(!T::kOutFp32 && T::kEpiChunksPerRound == 1 && T::kBlockN % T::kEpiRoundCols == 0 &&
                        kTrim % 16 == 0 && kTrim < T::kEpiRoundCols,
                    "uneven columns: BF16 out, one 128-byte chunk per round, whole rounds, whole stmatrix columns");
      constexpr int kFirst = (T::kBlockN - T::kEpiRoundCols) / 2;  // the last round's first register
      const bool trimmed = w.trim != 0;
#pragma unroll
      for (int i = T::kBlockN / 2 - 1; i >= kFirst; --i) acc[i] = trimmed ? acc[i - kShift] : acc[i];
    }
  }

  __device__ __forceinline__ void store(typename T::SharedStorage& ss, int consumer_wg,
                                        const CUtensorMap* tm_d, int m, int n, const WorkUnit& w,
                                        float (&acc)[T::kBlockN / 2]) {
    const int t = threadIdx.x % 128;
    const int warp = t / 32;
    const int lane = t % 32;
    const int row0 = w.m_block * T::kBlockM + consumer_wg * 64;
    const int col0 = tile_col0<T>(w);
    // Uneven columns: a trimmed tile's last round is stored w.trim columns to the left (apply
    // moved its fragments there).
    const bool trimmed = UnevenColumns<T>::value && w.trim != 0;
    // A whole warpgroup slice below the matrix (small M) goes through the motions (TMA clips the
    // box away): a branch here made ptxas serialize the overlapped kernels' wgmmas (C7518), and
    // took every non-overlapped kernel's K loop off the uniform datapath (docs/perf.md
    // block-scaled v7).

#pragma unroll
    for (int r = 0; r < T::kEpiRounds; ++r) {
      const int round_col = r * T::kEpiRoundCols;  // in the tile
      if (col0 + round_col >= n) break;  // uniform over the warpgroup
      constexpr int kTrim = UnevenColumnLayout::kTrim;
      constexpr bool kWholeRounds = kTrim % T::kEpiRoundCols == 0;
      // A trimmed tile's rounds past its edge are staged but not stored: a predicate, not a
      // branch (with the next unit's MMAs in flight a branch here cost ptxas the registers of
      // the wgmma pipeline, C7511).
      const bool past_edge = kWholeRounds && trimmed && round_col >= T::kBlockN - kTrim;
      const bool shifted = !kWholeRounds && r == T::kEpiRounds - 1 && trimmed;
      uint8_t* buf = ss.epi[consumer_wg][round_counter % T::kEpiSlots];
      // The stores issued kEpiSlots rounds ago read this slot; wait until they have. Thread 0
      // issues the stores. With the next unit's MMAs in flight (kOverlapEpilogue) every thread
      // waits and commits, so no lane branches: the others have only empty groups, which the
      // wait passes at once.
      const bool bulk_thread = T::kOverlapEpilogue || t == 0;
      if (bulk_thread) hopper::tma_store_wait_read<T::kEpiSlots - 1>();
      hopper::named_barrier_sync(barrier(consumer_wg), 128);

      if constexpr (!T::kOutFp32) {
        // 16 columns (32 bytes) per stmatrix: rows of 8 x 16 bytes, 8-column halves in units.
#pragma unroll
        for (int j = 0; j < T::kEpiRoundCols / 16; ++j) {
          if (round_col + 16 * j >= T::kBlockN) break;  // compile-time: the last round's tail
          const int g = (round_col + 16 * j) / 8;
          const uint32_t r0 = pack16(acc[4 * g + 0], acc[4 * g + 1]);
          const uint32_t r1 = pack16(acc[4 * g + 2], acc[4 * g + 3]);
          const uint32_t r2 = pack16(acc[4 * g + 4], acc[4 * g + 5]);
          const uint32_t r3 = pack16(acc[4 * g + 6], acc[4 * g + 7]);
          const int mi = lane / 8;
          const int row = warp * 16 + (mi % 2) * 8 + lane % 8;
          hopper::stmatrix_x4(staged(buf, row, 32 * j + 16 * (mi / 2)), r0, r1, r2, r3);
        }
      } else {
#pragma unroll
        for (int gl = 0; gl < T::kEpiRoundCols / 8; ++gl) {
          if (round_col + 8 * gl >= T::kBlockN) break;
          const int g = (round_col + 8 * gl) / 8;
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int row = warp * 16 + lane / 4 + 8 * h;
            const int byte = 4 * (8 * gl + 2 * (lane % 4));  // in the round's 128-byte row
            *reinterpret_cast<float2*>(staged(buf, row, byte)) = make_float2(acc[4 * g + 2 * h], acc[4 * g + 2 * h + 1]);
          }
        }
      }
      hopper::fence_async_shared();
      hopper::named_barrier_sync(barrier(consumer_wg), 128);
      if (bulk_thread) {
#pragma unroll
        for (int q = 0; q < T::kEpiChunksPerRound; ++q) {
          const int chunk_col = round_col + q * T::kEpiChunkCols;
          if (chunk_col >= T::kBlockN || col0 + chunk_col >= n) break;  // uniform over the warpgroup
          hopper::tma_store_2d_if(t == 0 && !past_edge, tm_d, buf + q * 64 * T::kEpiRowBytes,
                                  col0 + chunk_col - (shifted ? w.trim : 0), row0);
        }
        hopper::tma_store_commit();
      }
      ++round_counter;
    }
  }

  // Where byte `byte` of row `row` of a round (128 bytes per row) lands in its slot: the chunk
  // it falls in (64 rows x kEpiRowBytes each, one after the other), then the row, then its
  // 16-byte unit in the chunk's swizzle.
  __device__ __forceinline__ static uint8_t* staged(uint8_t* buf, int row, int byte) {
    const int q = byte / T::kEpiRowBytes;
    const int b = byte % T::kEpiRowBytes;
    return buf + q * 64 * T::kEpiRowBytes + row * T::kEpiRowBytes + T::epi_swizzle(b / 16, row) * 16 + b % 16;
  }

  // Unstaged plain variants (no bias): alpha only.
  __device__ __forceinline__ static void apply_alpha(float alpha, float (&acc)[T::kBlockN / 2]) {
#pragma unroll
    for (int i = 0; i < T::kBlockN / 2; ++i) acc[i] *= alpha;
  }

  // Staged variants: each row's scale (alpha with its per-token scale) times each column's
  // per-channel scale, then the bias. Absent scales are ones, so a bias alone computes
  // fmaf(acc, alpha, bias) exactly as before the scales existed.
  __device__ __forceinline__ static void apply_scales_bias(const typename T::SharedStorage& ss, int tile_col,
                                                           float2 rows, float (&acc)[T::kBlockN / 2]) {
#pragma unroll
    for (int g = 0; g < T::kBlockN / 8; ++g) {
      const float2 b = load_pair(ss.ops.bias + tile_col + 8 * g);
      const float2 c = *reinterpret_cast<const float2*>(ss.ops.col_scale + tile_col + 8 * g);
      acc[4 * g + 0] = fmaf(acc[4 * g + 0], rows.x * c.x, b.x);
      acc[4 * g + 1] = fmaf(acc[4 * g + 1], rows.x * c.y, b.y);
      acc[4 * g + 2] = fmaf(acc[4 * g + 2], rows.y * c.x, b.x);
      acc[4 * g + 3] = fmaf(acc[4 * g + 3], rows.y * c.y, b.y);
    }
  }

  // apply_scales_bias, then acc += the residual of the thread's fragment. Every residual load is
  // issued first (two BF16 in one register each), so their latencies overlap one another and the
  // scaling; waited for in batches of two column groups they made the fused call slower than the
  // GEMM plus a separate add at M = 2048 (docs/perf.md P1, "The residual beside per-row scales").
  __device__ __forceinline__ static void scales_bias_residual(const typename T::SharedStorage& ss,
                                                              const KernelParams& p, int tile_col, int row,
                                                              int col, float2 rows, float (&acc)[T::kBlockN / 2]) {
    constexpr int kGroups = T::kBlockN / 8;
    const ResidualRows res(p.epi, row, p.m, p.n);
    uint32_t raw[kGroups][2];
#pragma unroll
    for (int g = 0; g < kGroups; ++g)
#pragma unroll
      for (int h = 0; h < 2; ++h) raw[g][h] = res.load_raw(h, col + 8 * g);
    apply_scales_bias(ss, tile_col, rows, acc);
#pragma unroll
    for (int g = 0; g < kGroups; ++g)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float2 r = ResidualRows::unpack(raw[g][h]);
        acc[4 * g + 2 * h] += r.x;
        acc[4 * g + 2 * h + 1] += r.y;
      }
  }

  __device__ __forceinline__ static float2 load_pair(const __nv_bfloat16* ptr) {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(ptr));
  }

  // Shared memory must outlive the stores that read it.
  __device__ __forceinline__ void drain() {
    if (T::kOverlapEpilogue || threadIdx.x % 128 == 0) hopper::tma_store_wait_all<0>();  // the bulk threads (store)
  }

 private:
  // Two outputs in the 16-bit output type (BF16, or FP16 where T::kOutFp16), round to nearest even.
  __device__ __forceinline__ static uint32_t pack16(float lo, float hi) {
    if constexpr (T::kOutFp16) {
      const __half2 v = __floats2half2_rn(lo, hi);
      return *reinterpret_cast<const uint32_t*>(&v);
    } else {
      const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
      return *reinterpret_cast<const uint32_t*>(&v);
    }
  }
};

}  // namespace lowbit::gemm
