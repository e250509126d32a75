// FP8 GEMM fused epilogue: alpha, bias, a row-broadcast add (row r adds row r mod P of a
// [P, N] BF16 tensor: a ViT positional embedding), an activation (GELU, SiLU), a residual
// (a full [M, N] BF16 tensor), BF16 or FP32 out -- the order of gemm/epilogue_params.h.
//
// Why it is built this way (docs/perf.md W2): the row-broadcast tile is as large as the output
// tile, so reading it inside the epilogue costs L2 round trips that the tensor cores sit through,
// and staging it with one bulk copy per row queued hundreds of small copies on the TMA unit
// ahead of the mainloop's loads (W2 ran at 2.3x the plain GEMM's time). Instead:
//   - each consumer warpgroup has a staging slot (64 rows x 128 bytes) per round of its slice,
//     and a producer warp of its own, the feeder, which owns the slots' traffic;
//   - while the consumers run a unit's mainloop, the feeder gathers the unit's row-broadcast
//     rows into the slots: TMA boxes of 8 rows x 64 columns, in the slot's own 128-byte swizzle,
//     and, for a box whose rows wrap past P (which one box cannot express), cp.async pieces of
//     16 bytes; the bias slice beside them (cp.async). Gathered wholly with cp.async the rows cost
//     W2 1.2 ms: the load/store path with ~25 KiB of L1 left beside 200 KiB of shared memory
//     keeps too few pieces in flight;
//   - the consumers add the staged rows in place: element (row, c) of a round sits where the
//     round's BF16 output element (row, c) goes, so ldmatrix reads it in the accumulator's
//     fragment layout and stmatrix writes the result back to the same addresses (FP32 out: the
//     row's first 64 bytes, read by the whole warp before it writes);
//   - the feeder stores each written slot with TMA and waits until the stores have read the
//     slots before gathering the next unit's rows. The consumers never wait for a store.
// Per slot two mbarriers: `loaded` (lane 0's TMA boxes and all 32 lanes' cp.async pieces
// landed) and `written` (the consumer warpgroup's 4 warps left the round's output). A new fused operation belongs in
// gemm/epilogue_params.h and in round() here.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>

#include "gemm/epilogue_params.h"
#include "gemm/fp8/epilogue.cuh"
#include "gemm/fp8/traits.cuh"
#include "gemm/tile_scheduler.cuh"
#include "hopper/cp_async.cuh"
#include "hopper/mbarrier.cuh"
#include "hopper/stmatrix.cuh"
#include "hopper/tma.cuh"

namespace lowbit::fp8 {

template <class T>
struct FusedEpilogue {
  static_assert(T::kFused && T::kClusterM == 1, "the fused epilogue runs in single-CTA fused variants");
  static_assert(T::kEpiSlotsPerWg == T::kEpiRounds, "a slot per round of the slice");
  static_assert(T::kEpiRowBytes == 128 && T::kEpiChunksPerRound == 1, "one 128-byte chunk per round");
  static_assert(T::kBlockN % T::kEpiRoundCols == 0, "whole rounds: no column past the tile in a round");
  static_assert(T::kEpiRoundCols == 64 || T::kEpiRoundCols == 32, "BF16 or FP32 out");
  static constexpr int kRounds = T::kEpiRounds;
  static constexpr int kRoundCols = T::kEpiRoundCols;  // output columns per round: 64 BF16, 32 FP32
  // A slot holds 64 row-broadcast columns (128 bytes) of its 64 rows: the round's own (BF16 out)
  // or those of the round and its neighbour (FP32 out: a round is 32 columns).
  static constexpr int kBcastCols = 64;
  static constexpr int kBoxRows = 8;  // the TMA box: one 1 KiB swizzle atom
  static constexpr int kLoadedArrivals = 1 + 32;  // lane 0 (expect_tx), then every lane's cp.async arrival
  using Staged = Fp8Epilogue<T>;  // its staged(): where a byte of a round's row lies in the slot

  // Before the role split. Absent bias reads as zeros, so the element math has no branch for it.
  __device__ __forceinline__ static void init(typename T::SharedStorage& ss, const Fp8KernelParams& p) {
    if (threadIdx.x == 0) {
      for (int wg = 0; wg < T::kConsumerWarpgroups; ++wg)
        for (int r = 0; r < kRounds; ++r) {
          hopper::mbarrier_init(&ss.ops.loaded[wg][r], kLoadedArrivals);
          hopper::mbarrier_init(&ss.ops.written[wg][r], 4);
        }
    }
    if (p.epi.bias == nullptr)
      for (int i = threadIdx.x; i < T::kConsumerWarpgroups * T::kBlockN; i += blockDim.x)
        ss.ops.bias[i / T::kBlockN][i % T::kBlockN] = __float2bfloat16(0.0f);
  }

  // Feeder warp of consumer warpgroup `wg`: every unit in the consumers' order. Skips what the
  // consumers skip (a slice below the matrix, rounds right of it), so both count the same phases.
  template <class UnitAt>
  __device__ __forceinline__ static void feed(typename T::SharedStorage& ss, const Fp8KernelParams& p,
                                              const CUtensorMap* tm_d, const CUtensorMap* tm_bcast, int wg,
                                              int first_unit, int num_units,
                                              int unit_step, const UnitAt& unit_at) {
    const int lane = threadIdx.x % 32;
    const gemm::EpilogueParams& e = p.epi;
    uint32_t phase = 0;
    for (int u = first_unit; u < num_units; u += unit_step) {
      const gemm::WorkUnit w = unit_at(u);
      const int row0 = w.m_block * T::kBlockM + wg * 64;
      if (row0 >= p.m) continue;
      const int col0 = w.n_block * T::kBlockN;
      // The slots are free: the previous unit's stores have read them (waited for below).
      if (e.bias != nullptr)
        for (int i = lane; i < T::kBlockN / 8; i += 32)
          if (col0 + 8 * i < p.n) hopper::cp_async_16(&ss.ops.bias[wg][8 * i], e.bias + col0 + 8 * i);
#pragma unroll 1
      for (int r = 0; r < kRounds; ++r) {
        if (col0 + r * kRoundCols >= p.n) break;
        uint64_t* bar = &ss.ops.loaded[wg][r];
        if (e.row_bcast != nullptr) gather(ss.epi[wg][r], bar, p, tm_bcast, row0, col0 + kBcastCols * (r * kRoundCols / kBcastCols));
        else if (lane == 0) hopper::mbarrier_arrive(bar);
        hopper::cp_async_arrive_noinc(bar);
      }
#pragma unroll 1
      for (int r = 0; r < kRounds; ++r) {
        const int col = col0 + r * kRoundCols;
        if (col >= p.n) break;
        hopper::mbarrier_wait(&ss.ops.written[wg][r], phase);
        if (lane == 0 && ss.ops.store[wg]) {
          hopper::tma_store_2d(tm_d, ss.epi[wg][r], col, row0);
          hopper::tma_store_commit();
        }
      }
      if (lane == 0) hopper::tma_store_wait_read<0>();
      __syncwarp();
      phase ^= 1u;
    }
    if (lane == 0) hopper::tma_store_wait_all<0>();
  }

  // Consumer warpgroup `wg` after the unit's mainloop (and split-K fix-up): every round of its
  // slice, in order. `store`: this unit finishes the tile (else the rounds are passed through
  // untouched, keeping the barriers' phases in step). The activation and the residual pick one
  // compiled copy of the rounds per unit: tested per element, their branches made the epilogue
  // ~1500 instructions per warp and unit and W2 2x slower than the plain GEMM (docs/perf.md W2).
  __device__ __forceinline__ static void consume(typename T::SharedStorage& ss, int wg, const Fp8KernelParams& p,
                                                 const gemm::WorkUnit& w, float alpha, float (&acc)[T::kBlockN / 2],
                                                 bool store, uint32_t phase) {
    using Act = gemm::EpilogueActivation;
    const bool res = p.epi.residual != nullptr;
    const int act = p.epi.activation;
    if (act == static_cast<int>(Act::kGelu)) {
      if (res) rounds<Act::kGelu, true>(ss, wg, p, w, alpha, acc, store, phase);
      else rounds<Act::kGelu, false>(ss, wg, p, w, alpha, acc, store, phase);
    } else if (act == static_cast<int>(Act::kSilu)) {
      if (res) rounds<Act::kSilu, true>(ss, wg, p, w, alpha, acc, store, phase);
      else rounds<Act::kSilu, false>(ss, wg, p, w, alpha, acc, store, phase);
    } else {
      if (res) rounds<Act::kNone, true>(ss, wg, p, w, alpha, acc, store, phase);
      else rounds<Act::kNone, false>(ss, wg, p, w, alpha, acc, store, phase);
    }
  }

 private:
  // The slot's 64 rows x 64 columns from `col` of the row-broadcast tensor (rows row0.. of the
  // output: rows (row0 + i) mod P of the tensor). Box k holds slot rows 8k..8k+7; lane 0 loads
  // every box whose rows do not wrap past P with TMA and arms `bar` with their bytes, the lanes
  // gather the others with cp.async (all of them when P < 8). Rows past M are gathered too (they
  // are rows of the tensor all the same); columns past N: TMA fills zeros, cp.async leaves them.
  // Both only feed outputs the store clips.
  __device__ __forceinline__ static void gather(uint8_t* slot, uint64_t* bar, const Fp8KernelParams& p,
                                                const CUtensorMap* tm_bcast, int row0, int col) {
    const int lane = threadIdx.x % 32;
    const int period = p.epi.row_period;
    const int first = row0 % period;
    uint32_t whole = 0;  // boxes TMA loads
#pragma unroll
    for (int k = 0; k < 64 / kBoxRows; ++k)
      if ((first + kBoxRows * k) % period + kBoxRows <= period) whole |= 1u << k;
    if (lane == 0) {
      hopper::mbarrier_arrive_expect_tx(bar, static_cast<uint32_t>(__popc(whole)) * kBoxRows * 128u);
#pragma unroll 1
      for (int k = 0; k < 64 / kBoxRows; ++k)
        if (whole >> k & 1u)
          hopper::tma_load_2d(slot + k * kBoxRows * 128, tm_bcast, bar, col, (first + kBoxRows * k) % period);
    }
#pragma unroll 1
    for (int k = 0; k < 64 / kBoxRows; ++k) {
      if (whole >> k & 1u) continue;
      for (int i = lane; i < kBoxRows * 8; i += 32) {  // 8 pieces of 16 bytes per row
        const int row = kBoxRows * k + i / 8, q = i % 8;
        const int64_t src_row = (row0 + row) % period;
        if (col + 8 * q < p.n)
          hopper::cp_async_16(Staged::staged(slot, row, 16 * q), p.epi.row_bcast + src_row * p.n + col + 8 * q);
      }
    }
  }

  template <gemm::EpilogueActivation kAct, bool kResidual>
  __device__ __forceinline__ static void rounds(typename T::SharedStorage& ss, int wg, const Fp8KernelParams& p,
                                                const gemm::WorkUnit& w, float alpha, float (&acc)[T::kBlockN / 2],
                                                bool store, uint32_t phase) {
    const int row0 = w.m_block * T::kBlockM + wg * 64;
    if (row0 >= p.m) return;
    const int col0 = w.n_block * T::kBlockN;
    const int t = threadIdx.x % 128;
#pragma unroll
    for (int r = 0; r < kRounds; ++r) {
      if (col0 + r * kRoundCols >= p.n) break;  // uniform over the warpgroup
      hopper::mbarrier_wait(&ss.ops.loaded[wg][r], phase);
      // Read by the feeder after `written`; set only after `loaded`, which the feeder arms once it
      // is done with the previous unit's flag.
      if (r == 0 && t == 0) ss.ops.store[wg] = store;
      if (store) {
        round<kAct, kResidual>(r, ss, wg, p, row0, col0, alpha, acc);
        hopper::fence_async_shared();  // the round's shared-memory writes, before the TMA store reads them
      }
      __syncwarp();
      if (t % 32 == 0) hopper::mbarrier_arrive(&ss.ops.written[wg][r]);
    }
  }

  // Fragment of m64nN (warp wp, lane l): acc[4g + 2h + e] is row 16wp + l/4 + 8h, column
  // 8g + 2(l%4) + e of the warpgroup's slice. Called from a fully unrolled loop: `rnd` is a
  // constant there, so acc stays in registers.
  template <gemm::EpilogueActivation kAct, bool kResidual>
  __device__ __forceinline__ static void round(int rnd, typename T::SharedStorage& ss, int wg,
                                               const Fp8KernelParams& p, int row0, int col0, float alpha,
                                               float (&acc)[T::kBlockN / 2]) {
    constexpr int kGroups = kRoundCols / 8;
    const int g0 = rnd * kGroups;  // first column group of the round
    uint8_t* slot = ss.epi[wg][rnd];
    const int t = threadIdx.x % 128;
    const int warp = t / 32, lane = t % 32;
    const int tile_col = 2 * (lane % 4);
    const int frag_row = warp * 16 + lane / 4;  // rows frag_row and frag_row + 8 of the slice
    const gemm::EpilogueParams& e = p.epi;

    // Residual pairs first, all at once, so their latencies overlap.
    float2 res[kGroups][2];
    if constexpr (kResidual) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = row0 + frag_row + 8 * h;
#pragma unroll
        for (int j = 0; j < kGroups; ++j) {
          const int col = col0 + 8 * (g0 + j) + tile_col;
          res[j][h] = row < p.m && col < p.n ? load_pair(e.residual + static_cast<int64_t>(row) * p.n + col)
                                             : make_float2(0.0f, 0.0f);
        }
      }
    }
    // Row-broadcast pairs, in the fragment layout.
    float2 bc[kGroups][2];
    if constexpr (!T::kOutFp32) {
      // ldmatrix.x4 j: matrices (rows 0-7 | 8-15) x (groups 2j | 2j+1) of the warp's 16 rows.
      const int mi = lane / 8;
      const int srow = warp * 16 + (mi % 2) * 8 + lane % 8;
#pragma unroll
      for (int j = 0; j < kGroups / 2; ++j) {
        uint32_t q[4] = {0u, 0u, 0u, 0u};
        if (e.row_bcast != nullptr) hopper::ldmatrix_x4(Staged::staged(slot, srow, 32 * j + 16 * (mi / 2)), q[0], q[1], q[2], q[3]);
#pragma unroll
        for (int i = 0; i < 4; ++i) bc[2 * j + i / 2][i % 2] = unpack_bf16(q[i]);
      }
    } else {
#pragma unroll
      for (int j = 0; j < kGroups; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          bc[j][h] = e.row_bcast != nullptr
                         ? load_pair(reinterpret_cast<const __nv_bfloat16*>(Staged::staged(
                               slot, frag_row + 8 * h, 2 * (rnd * kRoundCols % kBcastCols + 8 * j + tile_col))))
                         : make_float2(0.0f, 0.0f);
      __syncwarp();  // every lane's row-broadcast reads before the outputs overwrite them
    }
    // The element math, in gemm/epilogue_params.h's order.
#pragma unroll
    for (int j = 0; j < kGroups; ++j) {
      const int g = g0 + j;
      const float2 b = load_pair(&ss.ops.bias[wg][8 * g + tile_col]);
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
    // The round's outputs, where the row-broadcast values were.
    if constexpr (!T::kOutFp32) {
      const int mi = lane / 8;
      const int srow = warp * 16 + (mi % 2) * 8 + lane % 8;
#pragma unroll
      for (int j = 0; j < kGroups / 2; ++j) {
        const int g = g0 + 2 * j;
        hopper::stmatrix_x4(Staged::staged(slot, srow, 32 * j + 16 * (mi / 2)), pack_bf16(acc[4 * g], acc[4 * g + 1]),
                            pack_bf16(acc[4 * g + 2], acc[4 * g + 3]), pack_bf16(acc[4 * g + 4], acc[4 * g + 5]),
                            pack_bf16(acc[4 * g + 6], acc[4 * g + 7]));
      }
    } else {
#pragma unroll
      for (int j = 0; j < kGroups; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int g = g0 + j;
          *reinterpret_cast<float2*>(Staged::staged(slot, frag_row + 8 * h, 4 * (8 * j + tile_col))) =
              make_float2(acc[4 * g + 2 * h], acc[4 * g + 2 * h + 1]);
        }
    }
  }

  __device__ __forceinline__ static float2 load_pair(const __nv_bfloat16* ptr) {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(ptr));
  }
  __device__ __forceinline__ static float2 unpack_bf16(uint32_t v) {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v));
  }
  __device__ __forceinline__ static uint32_t pack_bf16(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
  __device__ __forceinline__ static float gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
  __device__ __forceinline__ static float silu(float x) { return x / (1.0f + __expf(-x)); }
};

}  // namespace lowbit::fp8
