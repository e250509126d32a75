// The GEMM core's kernel: persistent, warp-specialized (one producer warpgroup, one or two
// WGMMA consumer warpgroups), a ring of shared-memory stages between them, promotion of each K
// block into FP32 registers, optional split-K (through the workspace, or within a cluster where T
// has the slots: gemm/core/split_k.cuh) or stream-K over the last tiles (T::kStreamK,
// StreamKWalk), and the staged TMA-store epilogue (gemm/core/epilogue.cuh). A family instantiates
// it with its traits (gemm/core/traits.cuh) and the policies they name: the operand path
// (T::Operands: dense E4M3, gemm/core/operands.cuh; the block-scaled scales; a 2:4-sparse A), the
// promotion (T::Promotion), the problems walked (T::Problems: one, or a family's groups), and the
// family's own epilogue where it has one (T::FusedEpilogue, T::RowScatter: FusedEpilogueOf,
// RowScatterOf). The core includes no family's header.
// Reads top to bottom: static checks -> shared-memory budget -> barrier init -> role split ->
// mainloop -> epilogue.
#pragma once

#include <cuda.h>

#include "gemm/core/epilogue.cuh"
#include "gemm/core/mainloop.cuh"
#include "gemm/core/problems.cuh"
#include "gemm/core/split_k.cuh"
#include "gemm/core/tile_scheduler.cuh"
#include "gemm/core/traits.cuh"
#include "hopper/cluster.cuh"
#include "hopper/mbarrier.cuh"
#include "hopper/registers.cuh"
#include "hopper/shared_storage.cuh"
#include "hopper/tma.cuh"

namespace lowbit::gemm {

template <class T>
__global__ void __launch_bounds__(T::kThreads, 1)
    gemm_kernel(const __grid_constant__ CUtensorMap tm_a, const __grid_constant__ CUtensorMap tm_b,
                const __grid_constant__ CUtensorMap tm_d, const __grid_constant__ CUtensorMap tm_bcast,
                const __grid_constant__ CUtensorMap tm_a_tail, const KernelParams p) {
  // Static checks.
  static_assert(T::kBlockN % 16 == 0 && T::kBlockN >= 16 && T::kBlockN <= 256, "wgmma N");
  static_assert(T::kSmemB == T::kBlockN * 128, "B: one 128-byte swizzle row per K block");
  static_assert(T::kSmemA % 1024 == 0 && T::kSmemB % 1024 == 0, "stages keep the 1024-byte swizzle alignment");
  static_assert((T::kBlockN / 2) % 4 == 0, "split-K stores fragments as float4");

  // Split K reduced within a cluster (gemm/core/split_k.cuh): the launch's cluster is the tile's splits,
  // at most a portable cluster; rank 1's partial lands in rank 0's epilogue staging.
  constexpr int kClusterSplits = ClusterSplitK<T>::value;
  constexpr bool kClusterSplit = kClusterSplits > 1;
  static_assert(kClusterSplits == 0 || (kClusterSplits >= 2 && kClusterSplits <= 8 && !T::kOverlapEpilogue &&
                                        !T::kFused && T::kClusterM == 1),
                "split K in a cluster: 2 to 8 splits, split units (no overlap), the plain or staged epilogue");
  static_assert(!kClusterSplit || 128 * (T::kBlockN / 2) * 4 == T::kEpiSlots * T::kEpiSlotBytes,
                "a consumer warpgroup's FP32 partial is its epilogue staging");

  // Several problems (T::Problems): each unit's maps and sizes are its group's, so nothing that
  // reads the kernel parameters' one problem per unit (split-K, a bias, the fused steps, clusters).
  using Problems = ProblemsOf<T>;
  static_assert(!kWalksGroups<T> || (T::kBlockM == 128 && !T::kFused && !T::kStaged && T::kClusterM == 1 &&
                                     !kClusterSplit && !UnevenColumns<T>::value),
                "grouped problems: 128-row tiles, plain epilogue, single CTAs, unsplit");

  // A family's row scatter (T::RowScatter: the block-scaled stacked problems') replaces the element
  // math and the TMA store: each row is weighted and added into its own row of an FP32 matrix.
  constexpr bool kScatter = kScattersRows<T>;
  using RowScatter = RowScatterOf<T>;
  static_assert(!kScatter || (kWalksGroups<T> && T::kOutFp32 && T::kOverlapEpilogue),
                "the row scatter: stacked problems, FP32 sums, the overlapped unit loop");

  // A's rows gathered by the producer warpgroup (kGathersA: a family's walk says where each row comes
  // from; produce_gathered_rows).
  static_assert(!kGathersA<T> || (kWalksGroups<T> && !T::kStaged && !T::kFused &&
                                  T::Operands::kBlocksPerPromotion == 1),
                "gathered rows: a family's walk, plain epilogue, a stage per K block");

  // The last tile row's shorter A box (KernelParams::a_tail_rows; its own map, tm_a_tail) in every
  // kernel of one problem whose A is dense: the grouped walks load each group's maps, and the
  // 2:4-sparse A (a stage read by loads) has a map of its own layout. Not with uneven columns: the
  // staged overlapped 256-wide kernel's wgmmas were serialized with it (C7511), and those tiles
  // run at large M, where the last tile row is one of many.
  constexpr bool kATailMap = !kWalksGroups<T> && !T::Operands::kReadsStage && !UnevenColumns<T>::value;

  // Shared-memory budget.
  static_assert(T::kSmemBytes <= kSm90MaxSmemPerBlock, "stages + epilogue staging exceed sm_90 shared memory");

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 900)
  extern __shared__ uint8_t smem_raw[];
  // Offset from the __shared__ array itself (not a pointer rebuilt from an integer), so the
  // compiler keeps the shared address space and ordinary accesses compile to LDS/STS.
  // Pinned in a register (see pinned_shared_storage) in the plain variants, where it measured
  // 3-8% faster (docs/perf.md W1 v4; the cluster pairs gained too); in the fused ones the
  // pinned register made the FP32-out kernels spill, so they keep the rebuilt address.
  constexpr bool kPin = !T::kFused;
  auto& ss = kPin ? hopper::pinned_shared_storage<typename T::SharedStorage>(smem_raw)
                  : hopper::aligned_shared_storage<typename T::SharedStorage>(smem_raw);
  const int warpgroup = threadIdx.x / 128;
  // setmaxnreg moves registers from the producer to the consumer warpgroups (RegisterSplit). With
  // one consumer warpgroup (64-row tiles) nothing needs moving (the kernel starts at
  // kConsumerRegs), but the instruction stays: its .sync.aligned form is what tells the compiler
  // the consumer's warps run converged. Without it their K loop built its stage and descriptor
  // addresses per thread (32-44 R2UR and a WARPSYNC per 8 wgmmas, against 16 R2UR; docs/perf.md
  // block-scaled v10).
  using Operands = typename T::Operands;  // dense, or 2:4-sparse A (gemm/sparse/operands.cuh)

  // One consumer warpgroup per 64 rows of the A box (two, or one for 64-row tiles and M <= 64).
  const int consumer_wgs = (p.a_box_rows + 63) / 64;

  // Barrier init: every working consumer warp of this CTA releases a stage once per phase; in a
  // cluster each peer's relay thread then says its copy is free too (peers multicast into it).
  // The staged epilogue operands are this CTA's alone.
  using StagedOps = StagedEpilogueOperands<T>;
  using Fused = FusedEpilogueOf<T>;
  static_assert(!T::kFused || !std::is_same_v<Fused, NoFamilyEpilogue>, "a fused variant names its fused epilogue");
  if constexpr (T::kFused) Fused::init(ss, p);
  else if constexpr (T::kStaged) StagedOps::init(ss, p, consumer_wgs);
  constexpr bool kCluster = T::kClusterM > 1 || kClusterSplit;
  if (threadIdx.x == 0) {
    // A gathered A (kGathersA<T>): every producer thread's cp.async arrival too.
    ss.bars.init(consumer_wgs * 4, T::kClusterM - 1, StageFillArrivals<T>::value + (kGathersA<T> ? kGatherThreads : 0));
    if constexpr (kClusterSplit) ss.csplit.init(consumer_wgs);
    hopper::mbarrier_init_fence();
    hopper::tma_prefetch_descriptor(&tm_a);
    hopper::tma_prefetch_descriptor(&tm_b);
    hopper::tma_prefetch_descriptor(&tm_d);
    if constexpr (T::kFused || UnevenColumns<T>::value || AScaleGroup<T>::value > 1)
      hopper::tma_prefetch_descriptor(&tm_bcast);
    // The tail map only where there is a tail: without one it is a copy of A's map, never loaded.
    // Prefetching it always, the block-scaled 128 x 144 kernel ran 12% slower at 1000 and 1024 x
    // 2112 x 7168 with the same K loop placed elsewhere (docs/perf.md block-scaled v20).
    if constexpr (kATailMap) {
      if (p.a_tail_rows > 0) hopper::tma_prefetch_descriptor(&tm_a_tail);
    }
  }
  // Peers' barriers must be initialized before the first multicast, remote arrival or st.async.
  // Splitting in a cluster, every access across it waits on an mbarrier: the relaxed form (a
  // GPU-scope MEMBAR per thread at start cost the split kernels about 1 us, block-scaled v6).
  if constexpr (kClusterSplit) hopper::cluster_sync_relaxed();
  else if constexpr (kCluster) hopper::cluster_sync();
  else __syncthreads();

  // A cluster walks units (a column of kClusterM vertically adjacent tiles of one B tile); rank r
  // takes the r-th tile (DenseProblems::unit). A tile below the matrix (odd tile rows) still loads
  // and multicasts its share of B; its A is all zero fill and its store is skipped.
  // Each role makes its own walk after setmaxnreg (values kept live across it were spilled); a
  // grouped walk's cursor is the role's own, and `issues_tma` says whether the role's thread
  // loads or stores through the groups' maps (then it acquires them).
  auto problems_for = [](bool issues_tma) { return Problems::make(issues_tma); };
  // A grouped walk's roles read its unit count (in memory) and their first unit after setmaxnreg:
  // read before it, they were held across it and spilled (the FP32-out 128 x 256 kernel).
  const int num_units = kWalksGroups<T> ? 0 : Problems::num_units(p);
  const int first_unit = kWalksGroups<T> ? 0 : static_cast<int>(blockIdx.x) / T::kClusterM;
  const int unit_step = static_cast<int>(gridDim.x) / T::kClusterM;
  // The relay and the staged-operand loaders walk one problem only (static checks above).
  auto unit_at = [&p](int u) { return DenseProblems<T>::unit(u, p); };
  // Without a bias or per-channel scales the staged slices are the zeros and ones init wrote:
  // no loads, no per-unit handshake.
  const bool staged = T::kStaged && !T::kFused && StagedOps::any(p);

  // Role split.
  if (warpgroup == 0) {
    // Producer: one thread issues every operand TMA load (or, where A's rows are gathered, the
    // whole warpgroup copies them and that thread loads B); warp 1 stages the bias (plain) or warps
    // 1 and 2 stage consumer warpgroup 0's and 1's epilogue operands (fused); in a cluster, warp 3
    // relays released stages to the peers; the rest of the warpgroup idles on few registers.
    hopper::warpgroup_reg_dealloc<T::kProducerRegs>();
    if constexpr (kGathersA<T>) {
      // Gathered A rows: the whole warpgroup copies them (produce_gathered_rows); thread 0 loads B
      // through the walk's map, with the family's extras.
      auto problems = problems_for(threadIdx.x == 0);
      const int units = Problems::num_units(p);
      hopper::RingPosition<T::kStages> pos;
      for (int u = static_cast<int>(blockIdx.x); u < units; u += unit_step) {
        const auto w = problems.unit(u, p);
        auto extra = Operands::template stage_extra<T>(ss, p, w, &tm_bcast);
        produce_gathered_rows<T>(ss, Problems::b_map(w, p, &tm_b), Problems::a_gather(w, p), unit_b_row<T>(w),
                                 w.kb_begin, w.kb_end, static_cast<uint32_t>(T::kSmemB) + extra.tx_bytes(), pos, extra,
                                 p.gather.b_evict_first);
      }
    } else if (threadIdx.x == 0) {
      auto problems = problems_for(true);
      int units = num_units, first = first_unit;
      if constexpr (kWalksGroups<T>) units = Problems::num_units(p), first = static_cast<int>(blockIdx.x);
      // The unit's operand maps: the kernel's own, or its group's. (Named here: passed through a
      // function of the walk, the kernel's own maps changed the dense kernels' code.)
      auto a_map = [&tm_a, &p](const auto& w) {
        if constexpr (kWalksGroups<T>) return Problems::a_map(w, p, &tm_a);
        else return &tm_a;
      };
      auto b_map = [&tm_b, &p](const auto& w) {
        if constexpr (kWalksGroups<T>) return Problems::b_map(w, p, &tm_b);
        else return &tm_b;
      };
      hopper::RingPosition<T::kStages> pos;
      for (int u = first; u < units; u += unit_step) {
        const auto w = problems.unit(u, p);
        // tm_bcast: the block-scaled A scales' map (their stage extras); uneven columns: B's map
        // for trimmed tiles (a kTrim rows shorter box).
        auto extra = Operands::template stage_extra<T>(ss, p, w, &tm_bcast);
        // The last tile row stops its A box at M (KernelParams::a_tail_rows); the rows past it
        // keep stale stage bytes, which only reach output rows the store clips.
        const CUtensorMap* am = a_map(w);
        int a_rows = p.a_box_rows;
        if constexpr (kATailMap) {
          if (p.a_tail_rows > 0 && w.m_block == p.a_tail_block) {
            am = &tm_a_tail;
            a_rows = p.a_tail_rows;
          }
        }
        produce_unit<T, decltype(extra), Operands>(ss, am, b_map(w), w, T::stage_tx_bytes(a_rows) + extra.tx_bytes(),
                                                   pos, extra, &tm_bcast);
      }
    } else if (T::kClusterM > 1 && threadIdx.x == 96) {
      // Relay: hands this CTA's released stages on to the peers (StageBarriers::relay_to_peers).
      hopper::RingPosition<T::kStages> pos;
      const uint32_t rank = hopper::cluster_rank();
      for (int u = first_unit; u < num_units; u += unit_step) relay_unit<T, Operands>(ss, unit_at(u), pos, rank);
    } else if constexpr (T::kFused) {
      const int feeder = static_cast<int>(threadIdx.x) / 32 - 1;
      if (feeder >= 0 && feeder < consumer_wgs)
        Fused::feed(ss, p, &tm_bcast, feeder, first_unit, num_units, unit_step, unit_at);
    } else if constexpr (T::kStaged) {
      if (threadIdx.x == 32 && staged) {
        uint32_t parity = 0;
        for (int u = first_unit; u < num_units; u += unit_step, parity ^= 1u) StagedOps::load(ss, p, unit_at(u), parity);
      }
    }
  } else {
    hopper::warpgroup_reg_alloc<T::kConsumerRegs>();
    // Read from lane 0, so the compiler knows it is warp-uniform: the stage descriptors built from
    // it then stay in uniform registers (no R2UR per wgmma; docs/perf.md block-scaled v11).
    const int consumer_wg = __shfl_sync(0xffffffffu, warpgroup - 1, 0);
    if (consumer_wg >= consumer_wgs) {  // its rows lie wholly past M (small M)
      if constexpr (kClusterSplit) hopper::cluster_sync_relaxed();
      else if constexpr (kCluster) hopper::cluster_sync();
      return;
    }
    const float alpha =
        p.epi.alpha * (p.epi.a_scale ? *p.epi.a_scale : 1.0f) * (p.epi.b_scale ? *p.epi.b_scale : 1.0f);
    // The unit's output map: the kernel's own, or its group's.
    auto d_map = [&tm_d, &p](const auto& w) {
      if constexpr (kWalksGroups<T>) return Problems::d_map(w, p, &tm_d);
      else return &tm_d;
    };
    auto problems = problems_for(threadIdx.x % 128 == 0);  // thread 0 of each warpgroup issues its stores
    int units = num_units, first = first_unit;
    if constexpr (kWalksGroups<T>) units = Problems::num_units(p), first = static_cast<int>(blockIdx.x);
    hopper::RingPosition<T::kStages> pos;
    TileEpilogue<T> epilogue;
    using Promotion = typename T::Promotion;  // plain, or block-scaled (T's family)
    Consumer<T, Promotion, Operands> consumer{ss, consumer_wg, pos, Promotion::make(ss, consumer_wg)};
    float acc[T::kBlockN / 2];
    if constexpr (T::kOverlapEpilogue) {
      // Each unit's first group is in flight while the previous unit is scaled, staged and
      // stored. No split-K fix-up here (the launcher refuses splits), and resident rows are
      // waited for once, up front: nothing waits or branches per lane while the group runs.
      // Staged operands (a bias, per-channel scales) are waited for before the next unit's group
      // is issued and released without a branch; the per-token scales of a unit are loaded
      // before its first group, as in the unoverlapped loop (W1 v20).
      // The loop is shaped so that every path into its next iteration has just issued the
      // group (a merge of an issued and an idle partial made ptxas serialize the wgmmas, C7514),
      // and the last unit's epilogue runs with nothing in flight.
      constexpr bool kStagedOps = T::kStaged && !T::kFused;
      if constexpr (T::kFused) Fused::wait_resident(ss);
      if (first < units) {
        int u = first;
        [[maybe_unused]] uint32_t parity = 0;  // the staged slices' phase
        auto w = problems.unit(u, p);
        if constexpr (kWalksGroups<T>) w = Problems::warp_uniform(w);
        float2 rows = make_float2(1.0f, 1.0f);  // the unit's per-token scales
        if constexpr (kStagedOps) rows = TileEpilogue<T>::row_scales(p, w, consumer_wg);
        consumer.promotion.start_unit(p, w);
        consumer.start(w);
        if constexpr (kScatter) RowScatter::prefetch_rows(p, w, consumer_wg);
        while (true) {
          // Mainloop.
          consumer.template run</*kIssuedAhead=*/true>(w, acc);
          // Nothing in flight: the unit's staged slices have had its whole mainloop to land.
          if constexpr (kStagedOps) {
            if (staged) StagedOps::wait(ss, parity);
            parity ^= 1u;
          }
          // The element math runs after the next unit's first group is issued, so the tensor
          // cores have work while both warpgroups scale their fragments (W1 v14).
          auto apply = [&] {
            if constexpr (T::kFused) {
              Fused::apply_overlapped(ss, consumer_wg, p, w, alpha, acc);
            } else if constexpr (!kScatter) {
              TileEpilogue<T>::apply(ss, consumer_wg, p, w, alpha, rows, acc);
              if constexpr (kStagedOps) StagedOps::release(ss);  // whether anything was staged or not
            }
          };
          const int next = u + unit_step;
          if (next >= units) {
            apply();
            if constexpr (kScatter) RowScatter::store(ss, p, w, consumer_wg, acc);
            else epilogue.store(ss, consumer_wg, d_map(w), Problems::m(w, p), Problems::n(w, p), w, acc);
            break;
          }
          // The next unit is placed here, with no MMA in flight: a grouped walk that enters a new
          // group branches and loads its descriptor.
          auto w_next = problems.unit(next, p);
          if constexpr (kWalksGroups<T>) w_next = Problems::warp_uniform(w_next);
          float2 rows_next = rows;
          if constexpr (kStagedOps) rows_next = TileEpilogue<T>::row_scales(p, w_next, consumer_wg);
          consumer.promotion.start_unit(p, w_next);
          consumer.start(w_next);
          if constexpr (kScatter) RowScatter::prefetch_rows(p, w_next, consumer_wg);
          apply();
          // Epilogue, under the next unit's first MMAs.
          if constexpr (kScatter) RowScatter::store(ss, p, w, consumer_wg, acc);
          else epilogue.store(ss, consumer_wg, d_map(w), Problems::m(w, p), Problems::n(w, p), w, acc);
          u = next;
          w = w_next;
          rows = rows_next;
        }
      }
    } else {
      uint32_t parity = 0;
      for (int u = first; u < units; u += unit_step, parity ^= 1u) {
        auto w = problems.unit(u, p);
        if constexpr (kWalksGroups<T>) w = Problems::warp_uniform(w);
        float2 rows = make_float2(1.0f, 1.0f);  // the unit's per-token scales
        if constexpr (T::kStaged && !T::kFused) rows = TileEpilogue<T>::row_scales(p, w, consumer_wg);
        // Mainloop.
        consumer.promotion.start_unit(p, w);
        consumer.run(w, acc);
        // Epilogue (after the split-K fix-up when K is split). Every unit's staged operands are
        // waited for and released, finished here or not, so the loader stays in step.
        const int thread = static_cast<int>(threadIdx.x) - 128;
        bool finish;
        if constexpr (kClusterSplit)
          finish = p.sched.splits == 1 || split_k_cluster_reduce(acc, w, p.sched.splits, ss.csplit,
                                                                 reinterpret_cast<float4*>(&ss.epi[0][0][0]), parity,
                                                                 thread, 128 * consumer_wgs);
        else if constexpr (StreamK<T>::value)  // a whole tile, or one of its w.parts pieces
          finish = w.parts == 1 || split_k_fixup_at(acc, w, w.parts, StreamKWalk::first_slot(w), p.partials,
                                                    p.tile_counters, thread, 128 * consumer_wgs);
        else
          finish = p.sched.splits == 1 ||
                   split_k_fixup(acc, w, p.sched.splits, p.partials, p.tile_counters, thread, 128 * consumer_wgs);
        // The verdict is the same in every thread (the fix-up's barrier OR); taken from lane 0 the
        // compiler knows it: read as it is, the unit loop's branches on it took the next unit's K
        // loop off the uniform datapath (per-thread stage and descriptor arithmetic; docs/perf.md
        // block-scaled v7).
        finish = __shfl_sync(0xffffffffu, finish, 0);
        if constexpr (T::kFused) {
          Fused::apply(ss, consumer_wg, p, w, alpha, acc, finish, parity);
        } else {
          if constexpr (T::kStaged)
            if (staged) StagedOps::wait(ss, parity);
          if (finish) TileEpilogue<T>::apply(ss, consumer_wg, p, w, alpha, rows, acc);
          if constexpr (T::kStaged)
            if (staged) StagedOps::release(ss);
        }
        if (finish) epilogue.store(ss, consumer_wg, d_map(w), Problems::m(w, p), Problems::n(w, p), w, acc);
        if constexpr (kClusterSplit)
          if (finish && p.sched.splits > 1 && u + unit_step < units)
            split_k_cluster_release(ss.csplit, p.sched.splits, thread);
      }
    }
    epilogue.drain();
  }
  // No CTA leaves while a peer may still multicast or st.async into its shared memory or arrive on
  // its barriers.
  if constexpr (kClusterSplit) hopper::cluster_sync_relaxed();
  else if constexpr (kCluster) hopper::cluster_sync();
#endif
}

}  // namespace lowbit::gemm
