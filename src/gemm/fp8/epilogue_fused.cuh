// FP8 GEMM fused epilogue: alpha, bias, a row-broadcast add (row r adds row r mod P of a
// [P, N] BF16 tensor: a ViT positional embedding), an activation (GELU, SiLU), a residual
// (a full [M, N] BF16 tensor) -- the order of gemm/core/epilogue_params.h -- then the plain
// epilogue's staged TMA store (gemm::TileEpilogue::store, BF16 or FP32 out).
//
// Why it is built this way (docs/perf.md W2). The row-broadcast tile is as large as the output
// tile, so it has to be in shared memory before the epilogue starts, and it has to be asked for
// early: a load issued when the unit's epilogue is near waits behind the mainloop's TMA loads
// already queued (~3 us of them), and W2 measured 1.0-1.2 ms slower with the rows gathered into
// the output slots after each store. So:
//   - each consumer warpgroup has a row-broadcast buffer for its 64 rows x block_n columns (64-
//     column chunks of 64 rows x 128 bytes, in the 128-byte swizzle) and the bias slice, refilled
//     by a producer warp of its own, the feeder, as soon as the warpgroup has read them -- at the
//     start of the next unit's mainloop, a whole mainloop before they are needed;
//   - the feeder loads TMA boxes of 8 rows x 64 columns; a box whose rows wrap past P (which one
//     box cannot express) is gathered with cp.async instead (all boxes when P < 8);
//   - the consumers read the rows with ldmatrix, which returns them in the accumulator's fragment
//     layout, so each thread reads exactly the values it adds.
// Per warpgroup two mbarriers: `full` (lane 0's boxes and the 32 lanes' cp.async pieces landed)
// and `empty` (the warpgroup's 4 warps have read the buffer). The activation and the residual pick
// one compiled copy of the element math per unit: tested per element, their branches made the
// epilogue ~1500 instructions per warp and unit and W2 2x slower than the plain GEMM.
// With resident rows (T::kResidentRows > 0) the launcher gives each CTA one N block for its whole
// walk, so rows [0, P) of that block's columns are loaded once, by feeder 0, before the first
// unit (TMA boxes of 8 rows; rows past P arrive as zeros), with the bias slice: `full` completes
// once and there is no per-unit handshake. Tile row r then reads buffer row (r0 + r) mod P.
// A new fused operation belongs in gemm/core/epilogue_params.h and in math() here.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "gemm/core/epilogue.cuh"
#include "gemm/core/epilogue_params.h"
#include "gemm/core/tile_scheduler.cuh"
#include "gemm/core/traits.cuh"
#include "hopper/cp_async.cuh"
#include "hopper/mbarrier.cuh"
#include "hopper/stmatrix.cuh"
#include "hopper/tma.cuh"

namespace lowbit::fp8 {

// Each consumer warpgroup's row-broadcast rows (64 x block_n BF16, in 64-column chunks of 64 rows x
// 128 bytes, 128-byte swizzled) and bias slice, refilled by a producer warp; `full` (they landed)
// and `empty` (the warpgroup read them).
template <int kWarpgroups, int kBlockN>
struct FusedOperands {
  alignas(1024) uint8_t bcast[kWarpgroups][kBlockN / 64][64 * 128];
  alignas(16) __nv_bfloat16 bias[kWarpgroups][kBlockN];
  uint64_t full[kWarpgroups];
  uint64_t empty[kWarpgroups];
};
// With resident rows: rows [0, P) of the CTA's columns (64-column chunks of kRows x 128 bytes,
// 128-byte swizzled as TMA writes 8-row boxes) and the bias slice, loaded once; `full` completes
// when they have landed.
template <int kBlockN, int kRows>
struct ResidentOperands {
  alignas(1024) uint8_t rows[kBlockN / 64][kRows * 128];
  alignas(16) __nv_bfloat16 bias[kBlockN];
  uint64_t full;
};

template <class T>
struct FusedEpilogue;

// A fused variant's traits: the core's (Core, a staged 128-row variant) with this family's fused
// epilogue, which the core kernel runs in place of its staged one (gemm::FusedEpilogueOf), and its
// operands laid out in the core's shared memory in place of the staged bias and channel scales.
// Kept a compile-time switch: with the fused steps merely present (and switched off at run time)
// the plain GEMM ran up to 2.6x slower on short-K shapes (docs/perf.md, W2 v1).
// kResidentRows_ > 0 keeps the row-broadcast tensor's rows [0, P), P <= that many, for the CTA's N
// block in shared memory for the whole kernel, loaded once; the launcher walks each CTA along M
// only (variants.h). 0: rows gathered per unit. The overlapped unit loop only with resident rows
// (FusedEpilogue::apply_overlapped).
template <class Core, int kResidentRows_>
struct WithFusedEpilogue : Core {
  static constexpr bool kFused = true;
  static constexpr int kResidentRows = kResidentRows_;
  static_assert(Core::kStaged && Core::kBlockM == 128 && Core::kClusterM == 1 && !Core::kStreamK && !Core::kUneven &&
                    !Core::kOutFp16,
                "the fused epilogue: staged 128-row single CTAs, no stream-K, uneven columns or FP16 out");
  static_assert(!Core::kOverlapEpilogue || kResidentRows > 0, "the overlapped fused epilogue: resident rows");
  static_assert(kResidentRows % 8 == 0, "resident rows: whole 8-row boxes");
  using FusedEpilogue = fp8::FusedEpilogue<WithFusedEpilogue>;
  using EpilogueOperands = std::conditional_t<(kResidentRows > 0), ResidentOperands<Core::kBlockN, kResidentRows>,
                                              FusedOperands<Core::kConsumerWarpgroups, Core::kBlockN>>;
  using SharedStorage = gemm::WithClusterLanding<typename Core::template StorageWith<EpilogueOperands>, Core::kBlockN,
                                                 Core::kConsumerWarpgroups, Core::kClusterSplits>;
  static constexpr int kSmemBytes = static_cast<int>(sizeof(SharedStorage)) + 1024;  // + alignment slack
};

template <class T>
struct FusedEpilogue {
  static_assert(T::kFused && T::kClusterM == 1, "the fused epilogue runs in single-CTA fused variants");
  static constexpr int kChunkCols = 64;  // row-broadcast columns per 128-byte swizzled chunk
  static_assert(T::kBlockN % kChunkCols == 0, "whole row-broadcast chunks per tile");
  static constexpr int kChunks = T::kBlockN / kChunkCols;
  static constexpr int kBoxRows = 8;              // the TMA box: one 1 KiB swizzle atom
  static constexpr int kFullArrivals = 1 + 32;  // lane 0 (expect_tx), then every lane's cp.async arrival

  static constexpr bool kResident = T::kResidentRows > 0;

  // Before the role split. Absent bias reads as zeros, so the element math has no branch for it.
  __device__ __forceinline__ static void init(typename T::SharedStorage& ss, const gemm::KernelParams& p) {
    if constexpr (kResident) {
      if (threadIdx.x == 0) hopper::mbarrier_init(&ss.ops.full, kFullArrivals);
      if (p.epi.bias == nullptr)
        for (int i = threadIdx.x; i < T::kBlockN; i += blockDim.x) ss.ops.bias[i] = __float2bfloat16(0.0f);
    } else {
      if (threadIdx.x == 0) {
        for (int wg = 0; wg < T::kConsumerWarpgroups; ++wg) {
          hopper::mbarrier_init(&ss.ops.full[wg], kFullArrivals);
          hopper::mbarrier_init(&ss.ops.empty[wg], 4);
        }
      }
      if (p.epi.bias == nullptr)
        for (int i = threadIdx.x; i < T::kConsumerWarpgroups * T::kBlockN; i += blockDim.x)
          ss.ops.bias[i / T::kBlockN][i % T::kBlockN] = __float2bfloat16(0.0f);
    }
  }

  // Whether warpgroup wg has rows in unit w. A unit without is still handed over (nothing
  // loaded, nothing read), so both sides flip their barrier phases once per unit.
  __device__ __forceinline__ static bool active(const gemm::KernelParams& p, const gemm::WorkUnit& w, int wg) {
    return w.m_block * T::kBlockM + wg * 64 < p.m;
  }

  // Feeder warp of consumer warpgroup `wg`: every unit in the consumers' order.
  template <class UnitAt>
  __device__ __forceinline__ static void feed(typename T::SharedStorage& ss, const gemm::KernelParams& p,
                                              const CUtensorMap* tm_bcast, int wg, int first_unit, int num_units,
                                              int unit_step, const UnitAt& unit_at) {
    const int lane = threadIdx.x % 32;
    const gemm::EpilogueParams& e = p.epi;
    if constexpr (kResident) {
      if (wg == 0 && first_unit < num_units) load_resident(ss, p, tm_bcast, unit_at(first_unit).n_block * T::kBlockN);
    } else {
      uint32_t phase = 0;
      for (int u = first_unit; u < num_units; u += unit_step) {
        const gemm::WorkUnit w = unit_at(u);
        const int row0 = w.m_block * T::kBlockM + wg * 64;
        const int col0 = w.n_block * T::kBlockN;
        uint64_t* full = &ss.ops.full[wg];
        hopper::mbarrier_wait(&ss.ops.empty[wg], phase ^ 1u);  // a fresh barrier lets the first unit through
        const bool rows = active(p, w, wg);
        if (e.bias != nullptr && rows) copy_bias(ss.ops.bias[wg], p, col0);
        if (e.row_bcast != nullptr && rows) gather(ss, wg, p, tm_bcast, row0, col0);
        else if (lane == 0) hopper::mbarrier_arrive(full);
        hopper::cp_async_arrive_noinc(full);
        phase ^= 1u;
      }
    }
  }

  // The overlapped resident twin (T::kOverlapEpilogue), whose next unit's first MMAs are in
  // flight during the epilogue: alpha, the bias and the row broadcast only (the launcher runs it
  // without an activation or residual), with no barrier wait and no branch per lane or per
  // warpgroup (rows past M compute harmlessly and TMA clips their store). The kernel waits for
  // the resident rows once, before its first unit (wait_resident).
  __device__ __forceinline__ static void wait_resident(typename T::SharedStorage& ss) {
    static_assert(kResident, "only resident rows stay complete");
    hopper::mbarrier_wait(&ss.ops.full, 0u);
  }
  __device__ __forceinline__ static void apply_overlapped(const typename T::SharedStorage& ss, int wg,
                                                          const gemm::KernelParams& p, const gemm::WorkUnit& w,
                                                          float alpha, float (&acc)[T::kBlockN / 2]) {
    static_assert(kResident && T::kOverlapEpilogue, "the overlapped twin keeps its rows resident");
    math<gemm::EpilogueActivation::kNone, false>(ss, wg, p, w, alpha, acc);
  }

  // Consumer warpgroup `wg` after the unit's mainloop (and split-K fix-up): waits for the staged
  // operands, applies the fused steps to acc when `finish` (this unit completes the tile and has
  // rows for this warpgroup), and hands the buffer back. `phase` flips per unit.
  __device__ __forceinline__ static void apply(typename T::SharedStorage& ss, int wg, const gemm::KernelParams& p,
                                               const gemm::WorkUnit& w, float alpha, float (&acc)[T::kBlockN / 2],
                                               bool finish, uint32_t phase) {
    if constexpr (kResident) hopper::mbarrier_wait(&ss.ops.full, 0u);  // completes once, stays complete
    else hopper::mbarrier_wait(&ss.ops.full[wg], phase);
    if (finish && active(p, w, wg)) {
      using Act = gemm::EpilogueActivation;
      const bool res = p.epi.residual != nullptr;
      const int act = p.epi.activation;
      if (act == static_cast<int>(Act::kGelu)) {
        if (res) math<Act::kGelu, true>(ss, wg, p, w, alpha, acc);
        else math<Act::kGelu, false>(ss, wg, p, w, alpha, acc);
      } else if (act == static_cast<int>(Act::kSilu)) {
        if (res) math<Act::kSilu, true>(ss, wg, p, w, alpha, acc);
        else math<Act::kSilu, false>(ss, wg, p, w, alpha, acc);
      } else {
        if (res) math<Act::kNone, true>(ss, wg, p, w, alpha, acc);
        else math<Act::kNone, false>(ss, wg, p, w, alpha, acc);
      }
    }
    if constexpr (!kResident) {  // resident rows are never refilled
      // The reads above (generic proxy) come before the feeder's next TMA boxes (async proxy)
      // write the same bytes.
      hopper::fence_async_shared();
      __syncwarp();
      if (threadIdx.x % 32 == 0) hopper::mbarrier_arrive(&ss.ops.empty[wg]);
    }
  }

 private:
  // Byte of 16-byte unit `unit` of row `row` in a 64 x 128-byte chunk with the 128-byte swizzle
  // (what TMA writes for a box whose start is 1 KiB aligned).
  __device__ __forceinline__ static int swizzled(int row, int unit) { return row * 128 + ((unit ^ (row & 7)) << 4); }

  // The warpgroup's 64 rows x block_n columns from col0 (rows row0.. of the output: rows
  // (row0 + i) mod P of the tensor). Box k of a chunk holds its rows 8k..8k+7; lane 0 loads every
  // box whose rows do not wrap past P with TMA and arms `full` with their bytes, the lanes gather
  // the others with cp.async. Rows past M are loaded too (they are rows of the tensor all the
  // same); chunks wholly past N are not, and TMA zero-fills the columns past N of a partial one.
  // Both only feed outputs the store clips.
  __device__ __forceinline__ static void gather(typename T::SharedStorage& ss, int wg, const gemm::KernelParams& p,
                                                const CUtensorMap* tm_bcast, int row0, int col0) {
    const int lane = threadIdx.x % 32;
    const int period = p.epi.row_period;
    const int first = row0 % period;
    uint64_t* full = &ss.ops.full[wg];
    uint32_t whole = 0;  // boxes TMA loads: the same for every chunk
#pragma unroll 1
    for (int k = 0; k < 64 / kBoxRows; ++k)
      if ((first + kBoxRows * k) % period + kBoxRows <= period) whole |= 1u << k;
    int chunks = (p.n - col0 + kChunkCols - 1) / kChunkCols;
    chunks = chunks < kChunks ? chunks : kChunks;
    if (lane == 0) {
      hopper::mbarrier_arrive_expect_tx(full, static_cast<uint32_t>(__popc(whole) * chunks) * kBoxRows * 128u);
#pragma unroll 1
      for (int c = 0; c < chunks; ++c)
#pragma unroll 1
        for (int k = 0; k < 64 / kBoxRows; ++k)
          if (whole >> k & 1u)
            hopper::tma_load_2d(ss.ops.bcast[wg][c] + k * kBoxRows * 128, tm_bcast, full, col0 + kChunkCols * c,
                                (first + kBoxRows * k) % period);
    }
#pragma unroll 1
    for (int k = 0; k < 64 / kBoxRows; ++k) {
      if (whole >> k & 1u) continue;
#pragma unroll 1
      for (int i = lane; i < chunks * kBoxRows * 8; i += 32) {  // 8 pieces of 16 bytes per chunk row
        const int c = i / (kBoxRows * 8), row = kBoxRows * k + i / 8 % kBoxRows, q = i % 8;
        const int col = col0 + kChunkCols * c + 8 * q;
        const int64_t src_row = (row0 + row) % period;
        if (col < p.n) hopper::cp_async_16(ss.ops.bcast[wg][c] + swizzled(row, q), p.epi.row_bcast + src_row * p.n + col);
      }
    }
  }

  // Resident rows: rows [0, P) of columns [col0, col0 + block_n) and the bias slice, once. Lane 0
  // loads the 8-row boxes and arms `full` with their bytes (a box reaching past P is zero-filled
  // and still counts); every lane copies bias pieces and arrives when they land. Chunks wholly
  // past N are not loaded: they only feed outputs the store clips.
  __device__ __forceinline__ static void load_resident(typename T::SharedStorage& ss, const gemm::KernelParams& p,
                                                       const CUtensorMap* tm_bcast, int col0) {
    const int lane = threadIdx.x % 32;
    const int boxes = (p.epi.row_period + kBoxRows - 1) / kBoxRows;
    int chunks = (p.n - col0 + kChunkCols - 1) / kChunkCols;
    chunks = chunks < kChunks ? chunks : kChunks;
    if (lane == 0) {
      hopper::mbarrier_arrive_expect_tx(&ss.ops.full, static_cast<uint32_t>(boxes * chunks) * kBoxRows * 128u);
#pragma unroll 1
      for (int c = 0; c < chunks; ++c)
#pragma unroll 1
        for (int k = 0; k < boxes; ++k)
          hopper::tma_load_2d(ss.ops.rows[c] + k * kBoxRows * 128, tm_bcast, &ss.ops.full, col0 + kChunkCols * c,
                              kBoxRows * k);
    }
    if (p.epi.bias != nullptr) copy_bias(ss.ops.bias, p, col0);
    hopper::cp_async_arrive_noinc(&ss.ops.full);
  }

  // The warp's lanes copy the bias slice [col0, col0 + block_n) (columns past N stay as they are:
  // they only feed outputs the store clips) with cp.async; the caller's arrival tracks them.
  __device__ __forceinline__ static void copy_bias(__nv_bfloat16* dst, const gemm::KernelParams& p, int col0) {
    for (int i = threadIdx.x % 32; i < T::kBlockN / 8; i += 32)
      if (col0 + 8 * i < p.n) hopper::cp_async_16(dst + 8 * i, p.epi.bias + col0 + 8 * i);
  }

  // Where warpgroup wg's row-broadcast chunk and bias slice live.
  __device__ __forceinline__ static const uint8_t* bcast_chunk(const typename T::SharedStorage& ss, int wg, int c) {
    if constexpr (kResident) return ss.ops.rows[c];
    else return ss.ops.bcast[wg][c];
  }
  __device__ __forceinline__ static const __nv_bfloat16* bias_slice(const typename T::SharedStorage& ss, int wg) {
    if constexpr (kResident) return ss.ops.bias;
    else return ss.ops.bias[wg];
  }

  // Fragment of m64nN (warp wp, lane l): acc[4g + 2h + e] is row 16wp + l/4 + 8h, column
  // 8g + 2(l%4) + e of the warpgroup's slice.
  template <gemm::EpilogueActivation kAct, bool kResidual>
  __device__ __forceinline__ static void math(const typename T::SharedStorage& ss, int wg, const gemm::KernelParams& p,
                                              const gemm::WorkUnit& w, float alpha, float (&acc)[T::kBlockN / 2]) {
    constexpr int kGroups = T::kBlockN / 8;
    constexpr int kStep = 2;  // column groups per residual batch (their loads overlap; 4 spilled at bn=192)
    const int t = threadIdx.x % 128;
    const int warp = t / 32, lane = t % 32;
    const int tile_col = 2 * (lane % 4);
    const int row = w.m_block * T::kBlockM + wg * 64 + warp * 16 + lane / 4;  // and row + 8
    const int col0 = w.n_block * T::kBlockN + tile_col;
    const gemm::EpilogueParams& e = p.epi;
    // ldmatrix.x4 of groups g, g + 1: matrices (rows 0-7 | 8-15) x (group g | g + 1) of the warp's
    // 16 rows; lane l addresses row l % 8 of matrix l / 8.
    const int mi = lane / 8;
    const int srow = warp * 16 + (mi % 2) * 8 + lane % 8;
    // The buffer row it reads: its row of the warpgroup's slice, or with resident rows the
    // tensor's row for that output row.
    int brow = srow;
    if constexpr (kResident) brow = (w.m_block * T::kBlockM + wg * 64 + srow) % e.row_period;
    const gemm::ResidualRows res_rows(e, kResidual ? row : p.m, p.m, p.n);  // no rows without a residual
#pragma unroll
    for (int g0 = 0; g0 < kGroups; g0 += kStep) {
      float2 res[kStep][2];
      if constexpr (kResidual) {
#pragma unroll
        for (int j = 0; j < kStep; ++j)
#pragma unroll
          for (int h = 0; h < 2; ++h) res[j][h] = res_rows.load(h, col0 + 8 * (g0 + j));
      }
      float2 bc[kStep][2];
#pragma unroll
      for (int j = 0; j < kStep; j += 2) {
        const int g = g0 + j;
        const int chunk = g * 8 / kChunkCols, unit = (g * 8 % kChunkCols) / 8 + mi / 2;
        uint32_t q[4] = {0u, 0u, 0u, 0u};
        if (e.row_bcast != nullptr)
          hopper::ldmatrix_x4(bcast_chunk(ss, wg, chunk) + swizzled(brow, unit), q[0], q[1], q[2], q[3]);
#pragma unroll
        for (int i = 0; i < 4; ++i) bc[j + i / 2][i % 2] = unpack_bf16(q[i]);
      }
#pragma unroll
      for (int j = 0; j < kStep; ++j) {
        const int g = g0 + j;
        const float2 b = load_pair(bias_slice(ss, wg) + 8 * g + tile_col);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float v0 = fmaf(acc[4 * g + 2 * h], alpha, b.x) + bc[j][h].x;
          float v1 = fmaf(acc[4 * g + 2 * h + 1], alpha, b.y) + bc[j][h].y;
          if constexpr (kAct == gemm::EpilogueActivation::kGelu) {
            v0 = gelu(v0);
            v1 = gelu(v1);
          } else if constexpr (kAct == gemm::EpilogueActivation::kSilu) {
            v0 = silu(v0);
            v1 = silu(v1);
          }
          if constexpr (kResidual) {
            v0 += res[j][h].x;
            v1 += res[j][h].y;
          }
          acc[4 * g + 2 * h] = v0;
          acc[4 * g + 2 * h + 1] = v1;
        }
      }
    }
  }

  __device__ __forceinline__ static float2 load_pair(const __nv_bfloat16* ptr) {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(ptr));
  }
  __device__ __forceinline__ static float2 unpack_bf16(uint32_t v) {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v));
  }
  // Out of line: inlined into 96 unrolled elements their temporaries made bn=192 spill.
  __device__ __noinline__ static float gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
  __device__ __noinline__ static float silu(float x) { return x / (1.0f + __expf(-x)); }
};

}  // namespace lowbit::fp8
