// The GEMM core's mainloop: the TMA producer and the WGMMA consumer for one work unit.
// Separate from the epilogue and the scheduler. What a stage holds and how it becomes MMAs is an
// operand-path policy (gemm/core/operands.cuh: dense; gemm/sparse/operands.cuh: 2:4 sparse);
// how a finished K block joins the FP32 accumulator is a promotion policy (plain, block-scaled).
#pragma once

#include <numeric>
#include <utility>

#include <cuda.h>

#include <type_traits>

#include "gemm/core/operands.cuh"
#include "gemm/core/problems.cuh"
#include "gemm/core/tile_scheduler.cuh"
#include "hopper/cache_policy.cuh"
#include "hopper/cluster.cuh"
#include "hopper/cp_async.cuh"
#include "hopper/mbarrier.cuh"
#include "hopper/tma.cuh"
#include "hopper/wgmma.cuh"

namespace lowbit::gemm {

// One elected thread streams the A and B tiles of each K block into the ring: A rows
// [a_row, a_row + T::kBlockM) and B rows [b_row, b_row + T::kBlockN). TMA zero-fills rows and
// columns past the tensor's edge, so partial tiles need no special case here. `stage_bytes`
// counts everything that completes on the stage's barrier.
// With a cluster of T::kClusterM CTAs along M (all on the same B tile), each CTA loads
// 1/kClusterM of the B rows and multicasts them to every CTA of the cluster: L2 serves each B
// tile once per cluster instead of once per CTA.
// Stage extras (scales, sparse metadata) are read by the consumers with ordinary loads, and the
// next bulk copy into the stage is an async-proxy write: one proxy fence here, after the empty
// barrier's acquire has ordered every consumer's reads before it, keeps those reads ahead of the
// write. (It used to sit in every consumer warp before each release, where its MEMBAR also
// waited for the warp's in-flight global loads: ~9% of the block-scaled GEMM under ncu, 1-2% in
// the interleaved bench, docs/perf.md block-scaled v3.)
// The stage's barrier is armed after its copies are issued, not before (DeepGEMM's order): its
// one pending arrival keeps the phase open while the copies' bytes land, and the transaction
// count may dip below zero until then. Measured 2% faster at 128 x 2112 x 7168 (the 64-row
// cluster split) and level elsewhere; why is not known (docs/perf.md block-scaled v21).
template <class T, class StageExtra = NoStageExtra, class Operands = DenseOperands>
__device__ __forceinline__ void produce_rows(typename T::SharedStorage& ss, const CUtensorMap* tm_a,
                                             const CUtensorMap* tm_b, int a_row, int b_row, int kb_begin, int kb_end,
                                             uint32_t stage_bytes, hopper::RingPosition<T::kStages>& pos,
                                             const StageExtra& extra = StageExtra{}) {
  constexpr bool kReadByLoads = Operands::kReadsStage || !std::is_same_v<StageExtra, NoStageExtra>;
  for (int kb = kb_begin; kb < kb_end; ++kb) {
    ss.bars.producer_acquire(pos);
    if constexpr (T::kClusterM > 1) ss.bars.wait_peers(pos);
    if constexpr (kReadByLoads) hopper::fence_async_shared();
    uint64_t* full = &ss.bars.full[pos.stage];
    hopper::tma_load_2d(ss.a[pos.stage], tm_a, full, kb * Operands::template a_cols_per_block<T>(), a_row);
    if constexpr (T::kClusterM == 1) {
      hopper::tma_load_2d(ss.b[pos.stage], tm_b, full, kb * T::kBlockK, b_row);
    } else {
      constexpr int kRows = T::kBlockN / T::kClusterM;
      constexpr int kRowBytes = T::kSmemB / T::kBlockN;
      const int rank = static_cast<int>(hopper::cluster_rank());
      hopper::tma_load_2d_multicast(ss.b[pos.stage] + rank * kRows * kRowBytes, tm_b, full, kb * T::kBlockK,
                                    b_row + rank * kRows, (1u << T::kClusterM) - 1u);
    }
    extra(pos.stage, kb, full);
    hopper::mbarrier_arrive_expect_tx(full, stage_bytes + extra.fill_tx(kb));
    pos.advance();
  }
}

// produce_rows for problems that gather A's rows (kGathersA<T>), run by every thread of the
// producer warpgroup: thread t owns tile row t, whose source row `gather.row(t)` it finds once per
// unit. Each warp copies its 32 rows, four per instruction with eight lanes on a row's 128 bytes
// of the K block (whole lines from global memory, every bank once in shared memory), into the
// stage in the 128-byte swizzle TMA writes (16-byte unit u of row r at u ^ r % 8; the stage is
// 1024-byte aligned), so the consumers read it as a TMA-loaded stage. A row without a source is
// zero filled. The eight source rows a lane copies from are shuffled to it once per unit, so a K
// block's copies wait on no shuffle (with a shuffle per copy the MoE GEMM ran 10% slower at K = 7168;
// the rows' 64-bit pointers kept instead spilled the 40-register producer).
// Every thread's cp.async arrival completes the fill with thread 0's, which also loads B by TMA
// with the family's extras and arms the stage with their bytes (`b_stage_bytes`); with
// `b_evict_first`, B's lines are the first L2 evicts, for the gathered rows (read again by every
// column tile and every expert that takes the token) to stay (docs/perf.md W6 v8).
// cp.async writes through the generic proxy and wgmma reads through the async one: the consumers
// fence the proxies after each wait (Consumer::issue).
template <class T, class StageExtra, class Gather>
__device__ __forceinline__ void produce_gathered_rows(typename T::SharedStorage& ss, const CUtensorMap* tm_b,
                                                      const Gather& gather, int b_row, int kb_begin, int kb_end,
                                                      uint32_t b_stage_bytes, hopper::RingPosition<T::kStages>& pos,
                                                      const StageExtra& extra, bool b_evict_first) {
  static_assert(T::kBlockM == kGatherThreads && T::kClusterM == 1, "one tile row per producer thread, single CTAs");
  static_assert(T::kBlockK == 128, "a row's K block is one 128-byte swizzle row");
  const int t = static_cast<int>(threadIdx.x) % kGatherThreads;
  const int lane = t % 32, warp_row0 = t - lane;
  const int unit16 = lane % 8;  // this lane's 16 bytes of a row
  const int src = gather.row(t);
  // Copy i: tile row warp_row0 + 4i + lane / 8, from byte off[i] + the K block's of gather.a (bit i
  // of `exists`: the row has a source). 32-bit offsets (the gather's source is under 4 GiB): added
  // to the K block's offset in 32 bits, they cannot be hoisted into eight 64-bit pointers, which
  // spilled the 40-register producer.
  uint32_t off[8];
  uint32_t exists = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int s = __shfl_sync(0xffffffffu, src, 4 * i + lane / 8);
    off[i] = static_cast<uint32_t>(max(s, 0)) * static_cast<uint32_t>(gather.lda) + unit16 * 16;
    exists |= (s >= 0 ? 1u : 0u) << i;
  }
  for (int kb = kb_begin; kb < kb_end; ++kb) {
    ss.bars.producer_acquire(pos);
    uint64_t* full = &ss.bars.full[pos.stage];
    uint8_t* stage_a = ss.a[pos.stage];
    const uint32_t k_off = static_cast<uint32_t>(kb) * T::kBlockK;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int r = warp_row0 + 4 * i + lane / 8;
      hopper::cp_async_16_zfill(stage_a + r * 128 + ((unit16 ^ (r % 8)) * 16), gather.a + (k_off + off[i]),
                                (exists >> i) & 1u);
    }
    gather.extras(ss, pos.stage, kb, t, src);
    hopper::cp_async_arrive_noinc(full);
    if (t == 0) {
      if (b_evict_first)
        hopper::tma_load_2d_hinted(ss.b[pos.stage], tm_b, full, kb * T::kBlockK, b_row, hopper::l2_evict_first_policy());
      else
        hopper::tma_load_2d(ss.b[pos.stage], tm_b, full, kb * T::kBlockK, b_row);
      extra(pos.stage, kb, full);
      hopper::mbarrier_arrive_expect_tx(full, b_stage_bytes + extra.fill_tx(kb));
    }
    pos.advance();
  }
}

// The unit's first A row and first B row in the maps it loads through: its tile's, or the rows
// that a unit type carries itself (StackedUnit: every group's rows in one A and one B,
// gemm/blockscaled/problems.cuh; its A rows are gathered, produce_gathered_rows).
template <class Unit, class = void>
struct CarriesRows : std::false_type {};
template <class Unit>
struct CarriesRows<Unit, std::void_t<decltype(Unit::a_row0), decltype(Unit::b_row0)>> : std::true_type {};
template <class T, class Unit>
__device__ __forceinline__ int unit_a_row(const Unit& w) {
  if constexpr (CarriesRows<Unit>::value) return w.a_row0;
  else return w.m_block * T::kBlockM;
}
template <class T, class Unit>
__device__ __forceinline__ int unit_b_row(const Unit& w) {
  if constexpr (CarriesRows<Unit>::value) return w.b_row0;
  else return tile_col0<T>(w);
}

// The tile of a work unit of the M x N tile grid.
// Uneven columns: a trimmed tile loads its B rows through `tm_b_trimmed`, whose box is
// kTrim rows shorter (so no box reaches past N, and no B row is loaded that no MMA reads).
template <class T, class StageExtra = NoStageExtra, class Operands = DenseOperands, class Unit = WorkUnit>
__device__ __forceinline__ void produce_unit(typename T::SharedStorage& ss, const CUtensorMap* tm_a,
                                             const CUtensorMap* tm_b, const Unit& w,
                                             uint32_t stage_bytes, hopper::RingPosition<T::kStages>& pos,
                                             const StageExtra& extra = StageExtra{},
                                             const CUtensorMap* tm_b_trimmed = nullptr) {
  constexpr int kGroup = Operands::kBlocksPerPromotion;  // the scheduler's K blocks are groups of stages
  if constexpr (UnevenColumns<T>::value) {
    if (w.trim != 0) {
      tm_b = tm_b_trimmed;
      stage_bytes -= static_cast<uint32_t>(w.trim * T::kBlockK);
    }
  }
  produce_rows<T, StageExtra, Operands>(ss, tm_a, tm_b, unit_a_row<T>(w), unit_b_row<T>(w),
                                        w.kb_begin * kGroup, w.kb_end * kGroup, stage_bytes, pos, extra);
}

// The relay thread of a CTA cluster (StageBarriers::relay_to_peers): the same stage fills as
// produce_unit, each handed to the peers once this CTA's consumers have released the stage.
template <class T, class Operands = DenseOperands>
__device__ __forceinline__ void relay_unit(typename T::SharedStorage& ss, const WorkUnit& w,
                                           hopper::RingPosition<T::kStages>& pos, uint32_t rank) {
  constexpr int kGroup = Operands::kBlocksPerPromotion;
  for (int kb = w.kb_begin * kGroup; kb < w.kb_end * kGroup; ++kb) {
    ss.bars.template relay_to_peers<T::kClusterM>(pos, rank);
    pos.advance();
  }
}

// One consumer warpgroup computes its 64 x BN slice of the unit. The tensor cores' FP8
// accumulator keeps fewer mantissa bits than FP32, so each K block (4 wgmma k-steps) goes into a
// fresh partial accumulator that is then added to the FP32 `acc` in registers ("promotion").
//
// Where registers allow (T::kDoubleBuffer: two partials + acc fit), the partial is
// double-buffered: the MMAs of K block j+1 are issued before the adds of block j, so the tensor
// cores always have a block queued and a stage's round trip is not bounded by MMA latency --
// what decides small-M, bandwidth-bound shapes. Otherwise block j is retired before j+1 issues,
// and the other consumer warpgroup's MMAs keep the tensor cores busy during the adds. The widest
// tile (256 columns: a 128-register acc) issues each K block in two 128-column parts through one
// 64-register partial, so acc + partial still fit; its 128 x 256 tile reads a quarter fewer
// operand bytes per FLOP from L2 than 128 x 128.
template <class T, class Promotion = PlainPromotion, class Operands = DenseOperands>
struct Consumer {
  static constexpr int kPartN = T::kBlockN > 192 ? T::kBlockN / 2 : T::kBlockN;  // columns per partial
  static constexpr int kParts = T::kBlockN / kPartN;
  static_assert(kParts == 1 || !T::kDoubleBuffer, "N-split partials are retired one by one");
  static constexpr int kRegs = T::kBlockN / 2;
  static constexpr int kPartRegs = kPartN / 2;
  // The stage is read by ordinary loads (scales, sparse metadata), not only by wgmma.
  static constexpr bool kReadsStage = Promotion::kReadsStage || Operands::kReadsStage;
  // K blocks accumulated in one partial before it is promoted: as many as keep the products per
  // partial at the dense K block's 128 (a sparse K block holds half as many).
  static constexpr int kGroup = Operands::kBlocksPerPromotion;
  static_assert(kGroup == 1 || !Promotion::kReadsStage, "per-block scales need per-block promotion");
  // Uneven columns: a trimmed tile's last part is kTrim columns narrower (serial_parts), which needs
  // serially retired column parts.
  static constexpr bool kUneven = UnevenColumns<T>::value;
  static_assert(!kUneven || (kParts == 2 && Operands::kPromote), "uneven columns: two serially retired parts");
  // Partials in flight in the double-buffered loop: 3 for the 64-row tiles where the promotion says
  // so, else 2. One consumer warpgroup, one warp per scheduler: a group's issue-to-retire latency is
  // on the K loop's chain (block-scaled 64 x 32 2% faster, the per-tensor tiles up to 1.5% slower:
  // docs/perf.md block-scaled v16).
  static constexpr int kDepth =
      T::kDoubleBuffer && T::kBlockM == 64 && kParts == 1 && Promotion::kThirdPartial ? 3 : 2;
  // A consumer holds kDepth (serial: 1) groups of stages at once; fewer stages would deadlock.
  static_assert(T::kStages >= (T::kDoubleBuffer ? kDepth : 1) * kGroup, "the ring must hold the groups in flight");

  struct Partial {
    float r[kPartRegs];
    typename Promotion::Pending pending;
    typename Promotion::Staged staged;  // read from the stage at issue, used at retire
    int stage[kGroup];  // whose MMAs are issued but not yet retired
    typename Operands::StageRegs regs[kGroup];  // what those MMAs read from registers
  };

  typename T::SharedStorage& ss;
  int consumer_wg;
  hopper::RingPosition<T::kStages>& pos;
  Promotion promotion{};
  // What the promotion fetches from global memory (the block-scaled B scales) is fetched one
  // group ahead: fetched at the group's own issue, an L2 round trip under full TMA load outlasts
  // the MMAs of a serially retired part, and the adds waited for it.
  typename Promotion::Pending ahead{};
  int kb_last = 0;  // the unit's last group
  // Uneven columns: whether the unit's tile is kTrim columns short of kBlockN (start). Once
  // start(w_next) has run it describes the next unit: the epilogue reads w.trim instead. (The
  // overlapped 256-wide kernel has no register to spare: a second one here made ptxas
  // serialize its wgmmas, C7511.)
  static constexpr int kTrim = UnevenColumnLayout::kTrim;
  bool trimmed = false;

  // Part `part_n` (columns [part_n * kPartN, +kN)) of the kGroup K blocks from kb, as one
  // wgmma group into a fresh partial (its first kN / 2 registers). The first part waits for the
  // stages, the last one moves the ring on. Straight-line code between the fence and the
  // commit: a wait loop or a branch inside a wgmma group makes ptxas serialize every wgmma of
  // the kernel (C7520).
  // kPos: the group's place among the promotion's static group (Promotion::kStaticGroup), fixed
  // by the unrolled loop (run); 0 elsewhere.
  template <int kN = kPartN, int kPos = 0>
  __device__ __forceinline__ void issue(Partial& part, int kb, int part_n = 0) {
    static_assert(kN <= kPartN, "a part fits its partial");
    if (part_n == 0) {
      part.pending = ahead;
      promotion.issued(ahead, min(kb + kGroup, kb_last));
      hopper::RingPosition<T::kStages> at = pos;
#pragma unroll
      for (int i = 0; i < kGroup; ++i, at.advance()) ss.bars.consumer_wait(at);
      if constexpr (kGathersA<T>) hopper::fence_async_shared();  // the rows cp.async wrote, to wgmma
      part.staged = promotion.template read_stage<kPos>(pos.stage);
    }
    hopper::RingPosition<T::kStages> at = pos;
#pragma unroll
    for (int i = 0; i < kGroup; ++i, at.advance()) {  // loaded before the fence: wgmma reads them
      part.stage[i] = at.stage;
      part.regs[i] = Operands::template stage_regs<T>(ss, at.stage, consumer_wg);
    }
    const int b_row = part_n * kPartN;
    hopper::fence_operands(part.r);
    hopper::wgmma_fence();
#pragma unroll
    for (int i = 0; i < kGroup; ++i)
      Operands::template mma<T, kN>(ss, part.stage[i], part.regs[i], consumer_wg, b_row,
                                    *reinterpret_cast<float(*)[kN / 2]>(part.r), /*accumulate=*/i > 0);
    hopper::wgmma_commit_group();
    if (part_n == kParts - 1) pos = at;
  }

  // Waits until at most kInFlight committed groups remain and promotes the retired part into its
  // columns of acc; after the last part, hands its stages back (their bytes are no longer read).
  // Only to this CTA's barrier, also in a cluster: the relay thread hands it on to the peers
  // that multicast into the stage (StageBarriers::relay_to_peers).
  template <int kInFlight>
  __device__ __forceinline__ void retire(Partial& part, float (&acc)[kRegs], int part_n = 0) {
    hopper::wgmma_wait_group<kInFlight>();
    hopper::fence_operands(part.r);
#pragma unroll
    for (int i = 0; i < kGroup; ++i) Operands::hold(part.regs[i]);
    const typename Promotion::Scale scale =
        promotion.scale(part.pending, part.staged, part.stage[0], consumer_wg, part_n);
    if (part_n == kParts - 1) release(part.stage);
    // The part's columns are fragment groups [part_n * kPartN / 8, ...): a contiguous slice of acc.
    promotion.apply(scale, part.r, *reinterpret_cast<float(*)[kPartRegs]>(acc + part_n * kPartRegs));
  }

  // Without promotion (Operands::kPromote false: F16 inputs, whose MMAs accumulate in full FP32)
  // every group goes straight into acc; a group's stages are handed back once the next group is
  // issued and this one has retired (wait depth 1), so the tensor cores always have a group queued.
  // Two register sets alternate (unrolled by two) so a group's operand registers stay untouched
  // while it runs.
  struct DirectGroup {
    int stage[kGroup];
    typename Operands::StageRegs regs[kGroup];
  };
  // The unit's first group overwrites acc (`first`): acc is never zeroed on this path. (With
  // zeroed registers next to the accumulators, ptxas once scheduled the zeroing between a
  // group's wgmmas and serialized every wgmma of the kernel, C7520.)
  __device__ __forceinline__ void issue_direct(DirectGroup& g, float (&acc)[kRegs], bool first = false) {
    hopper::RingPosition<T::kStages> at = pos;
#pragma unroll
    for (int i = 0; i < kGroup; ++i, at.advance()) {
      ss.bars.consumer_wait(at);
      g.stage[i] = at.stage;
      g.regs[i] = Operands::template stage_regs<T>(ss, at.stage, consumer_wg);
    }
    // No fence_operands(acc) here: the previous group still writes acc, and a register
    // constraint on it would make ptxas wait for that group before this one issues.
    hopper::wgmma_fence();
    // Whole-width MMAs: with no partial there is no register reason to split N (and the split
    // made ptxas serialize the wgmmas across the unrolled issue sites, C7520).
#pragma unroll
    for (int i = 0; i < kGroup; ++i)
      Operands::template mma<T, T::kBlockN>(ss, g.stage[i], g.regs[i], consumer_wg, /*b_row=*/0, acc,
                                            /*accumulate=*/!first || i > 0);
    hopper::wgmma_commit_group();
    pos = at;
  }
  template <int kInFlight>
  __device__ __forceinline__ void retire_direct(DirectGroup& g) {
    hopper::wgmma_wait_group<kInFlight>();
#pragma unroll
    for (int i = 0; i < kGroup; ++i) Operands::hold(g.regs[i]);
    release(g.stage);
  }
  __device__ __forceinline__ void run_direct(int kb_begin, int kb_end, float (&acc)[kRegs]) {
    DirectGroup g0, g1;
    int kb = kb_begin;  // the scheduler's units are never empty
    issue_direct(g0, acc, /*first=*/true);
    kb += kGroup;
    while (true) {
      if (kb == kb_end) {
        retire_direct<0>(g0);
        break;
      }
      issue_direct(g1, acc);
      kb += kGroup;
      retire_direct<1>(g0);
      if (kb == kb_end) {
        retire_direct<0>(g1);
        break;
      }
      issue_direct(g0, acc);
      kb += kGroup;
      retire_direct<1>(g1);
    }
    hopper::fence_operands(acc);
  }

  // Hands a retired group's stages back. With ordinary reads of the stage, every lane's reads
  // come before lane 0's release (the producer's proxy fence after its acquire then orders them
  // before its next bulk copy into the stage, produce_rows; a gathering producer writes what the
  // consumers read with ordinary loads by cp.async, the generic proxy, and needs none).
  __device__ __forceinline__ void release(const int (&stages)[kGroup]) {
    if constexpr (kReadsStage) __syncwarp();
    if (threadIdx.x % 32 == 0) {
#pragma unroll
      for (int i = 0; i < kGroup; ++i) ss.bars.consumer_release(stages[i]);
    }
  }

  // The partials, members so that a unit's first group can be issued before run() (start); p2 only
  // where kDepth is 3.
  Partial p0, p1;
  std::conditional_t<kDepth == 3, Partial, char> p2;

  // Issues the unit's first group (its first column part) into p0 without touching acc. With
  // kIssuedAhead the kernel calls it before the previous unit's epilogue, so the tensor cores
  // work while the warpgroup stores (KernelTraits::kOverlapEpilogue); otherwise run() calls it.
  // Promoted paths only: the direct path's first group overwrites acc.
  __device__ __forceinline__ void start(const WorkUnit& w) {
    static_assert(Operands::kPromote, "the direct (unpromoted) path's first group writes acc");
    const int kb_begin = w.kb_begin * kGroup;
    kb_last = w.kb_end * kGroup - kGroup;
    if constexpr (kUneven) trimmed = w.trim != 0;
    promotion.issued(ahead, kb_begin);
    issue(p0, kb_begin);
  }

  // The unit's K range counts groups of kGroup K blocks (the scheduler's blocks are groups).
  // kIssuedAhead: start(w) already issued the first group.
  template <bool kIssuedAhead = false>
  __device__ __forceinline__ void run(const WorkUnit& w, float (&acc)[kRegs]) {
    if constexpr (Operands::kPromote) {
#pragma unroll
      for (int i = 0; i < kRegs; ++i) acc[i] = 0.0f;
    }
    const int kb_begin = w.kb_begin * kGroup, kb_end = w.kb_end * kGroup;
    if constexpr (!Operands::kPromote) {
      static_assert(!kIssuedAhead, "the direct path issues its own first group");
      kb_last = kb_end - kGroup;
      promotion.issued(ahead, kb_begin);
      run_direct(kb_begin, kb_end, acc);
    } else if constexpr (T::kDoubleBuffer) {
      // Unrolled by two so each partial stays a fixed register array, and by the promotion's static
      // group so each group's place in it is a constant (kUnroll).
      if constexpr (!kIssuedAhead) start(w);
      int kb = kb_begin + kGroup;
      if constexpr (kDepth == 3) {
        // The unit's second group into p1 before the loop, which then keeps three in flight.
        if (kb == kb_end) {
          retire<0>(p0, acc);
          return;
        }
        issue<kPartN, 1 % Promotion::kStaticGroup>(p1, kb);
        kb += kGroup;
      }
      while (steps(std::make_integer_sequence<int, kUnroll>{}, kb, kb_end, acc)) {
      }
    } else {
      // Serially retired parts through one partial; the first part of the first group is start's.
      if constexpr (!kIssuedAhead) start(w);
      retire<0>(p0, acc, 0);
      // Uneven columns: a trimmed tile's K loop is its own copy (its last part kTrim columns
      // narrower), chosen once per unit while no MMA is in flight, not per group.
      if constexpr (kUneven) {
        if (trimmed) {
          serial_parts<kPartN - kTrim>(kb_begin, kb_end, acc);
          return;
        }
      }
      serial_parts<kPartN>(kb_begin, kb_end, acc);
    }
  }

  // The double-buffered loop's body, kUnroll steps: step k issues the next group into the partial
  // the oldest in flight will free (its place kPos = k + kDepth - 1 after the unit's first, issued by
  // start) and retires that oldest one; false once the unit's last group has retired. Unrolled by a
  // multiple of kDepth and of the static group, so every partial and place is a constant.
  static constexpr int kUnroll = std::lcm(kDepth, Promotion::kStaticGroup);
  template <int kI>
  __device__ __forceinline__ Partial& partial() {
    if constexpr (kI % kDepth == 0) return p0;
    else if constexpr (kI % kDepth == 1) return p1;
    else return p2;
  }
  template <int kStep>
  __device__ __forceinline__ bool step(int& kb, int kb_end, float (&acc)[kRegs]) {
    Partial& prev = partial<kStep>();
    if (kb == kb_end) {
      retire<kDepth - 2>(prev, acc);
      if constexpr (kDepth == 3) retire<0>(partial<kStep + 1>(), acc);
      return false;
    }
    issue<kPartN, (kStep + kDepth - 1) % Promotion::kStaticGroup>(partial<kStep + kDepth - 1>(), kb);
    kb += kGroup;
    retire<kDepth - 1>(prev, acc);
    return true;
  }
  template <int... kSteps>
  __device__ __forceinline__ bool steps(std::integer_sequence<int, kSteps...>, int& kb, int kb_end,
                                        float (&acc)[kRegs]) {
    return (step<kSteps>(kb, kb_end, acc) && ...);
  }

  // The serially retired parts after the unit's first part: the rest of the first group, then
  // every later group; the last part of each group is kLastN columns wide.
  template <int kLastN>
  __device__ __forceinline__ void serial_parts(int kb_begin, int kb_end, float (&acc)[kRegs]) {
    static_assert(Promotion::kStaticGroup == 1, "a static group needs the double-buffered loop's fixed places");
#pragma unroll
    for (int part_n = 1; part_n < kParts; ++part_n) {
      if (part_n == kParts - 1) issue<kLastN>(p0, kb_begin, part_n);
      else issue(p0, kb_begin, part_n);
      retire<0>(p0, acc, part_n);
    }
    for (int kb = kb_begin + kGroup; kb < kb_end; kb += kGroup) {
#pragma unroll
      for (int part_n = 0; part_n < kParts; ++part_n) {
        if (part_n == kParts - 1) issue<kLastN>(p0, kb, part_n);
        else issue(p0, kb, part_n);
        retire<0>(p0, acc, part_n);
      }
    }
  }
};

}  // namespace lowbit::gemm
