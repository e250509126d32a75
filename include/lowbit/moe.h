// Fused FP8 Mixture-of-Experts forward on Hopper (workload W6):
//   Y[t] = sum over the top-k experts e of token t of  weight(t, e) * (X[t] . W_e^T)
// with X quantized per token per 128 of K to E4M3 (FP32 scale amax / 448) and W_e E4M3 with one
// FP32 scale per 128 x 128 block (the block-scaled recipe of lowbit/blockscaled.h).
//
// Stages, all on the caller's stream, no host synchronization, no allocation -- the whole call
// can be captured in a CUDA graph and replayed with new inputs in the same buffers:
//   1. route:     softcap c * tanh(x / c) (c = 0: none) -> softmax over E -> top-k ids and
//                 weights (ties broken by the lower id; -0 ties +0; a NaN logit ranks as -inf;
//                 +inf logits share all the weight; a row with no finite logit weighs every
//                 expert alike), optionally renormalized to sum to 1.
//   2. layout:    tokens per expert, expert segment offsets and the GEMM's tile schedule
//                 (a parallel count and block scan).
//   3. quantize + gather: each token quantized once and its rows written into its experts'
//                 segments of the expert-sorted activation buffer; with the token-rows GEMM
//                 (MoeConfig::token_rows) written once, to the token's own row, which the GEMM
//                 gathers from as it loads each expert's rows.
//   4. expert GEMM with the weighted scatter fused into its epilogue: only experts with tokens
//                 have tiles. Atomic mode adds each row into Y (FP32 atomics, run-to-run order
//                 varies); deterministic mode writes each (token, expert) row and a finishing
//                 pass sums a token's k rows in a fixed order: bitwise reproducible.
//   5. finish (only for BF16 output or deterministic mode): the FP32 sums -> Y.
// Each stage can also be called alone (moe_run_stage), e.g. with the caller's own router: pass
// topk_ids / topk_weights and start at the layout stage.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "lowbit/gemm.h"
#include "lowbit/status.h"

namespace lowbit {

enum class MoeReduce { kAtomic, kDeterministic };

// Sizes. Limits (checked, with a message): 1 <= experts <= 512, 1 <= top_k <= min(32, experts),
// k a positive multiple of 128, n a positive multiple of 16, m >= 0 (m = 0 writes nothing).
struct MoeShape {
  int m = 0;        // tokens
  int n = 0;        // expert output features
  int k = 0;        // hidden size
  int experts = 0;  // E
  int top_k = 0;
};

struct FusedMoeArgs {
  MoeShape shape;
  // Routing from gating logits [m, experts] (FP32 or BF16)...
  const void* logits = nullptr;
  OutType logits_type = OutType::kFP32;
  float softcap = 0.0f;      // 0 = no softcap, else a finite normal float > 0
  bool renormalize = true;   // top-k weights divided by their sum
  // ...or the caller's routing (both device arrays [m, top_k]); when given, the route stage is
  // skipped and logits may be null. Ids are checked on the device: a pair whose id is out of
  // range is left out of Y and reported by moe_check_status.
  const int32_t* topk_ids = nullptr;
  const float* topk_weights = nullptr;
  const void* x = nullptr;         // BF16 [m, k], 16-byte aligned
  const void* w = nullptr;         // E4M3 [experts, n, k], 16-byte aligned
  const float* w_scales = nullptr; // FP32 [experts, n / 128 rounded up, k / 128]
  void* y = nullptr;               // [m, n] of y_type, 16-byte aligned
  OutType y_type = OutType::kFP32;
  MoeReduce reduce = MoeReduce::kAtomic;
};

// Launch knobs of the expert GEMM, printable and forceable from lowbit-bench. 0 = chosen from
// the shape by moe_choose_config (a table with a reason per row: moe_config_table()).
struct MoeConfig {
  int token_tile = 0;  // tokens per tile (the WGMMA N): 16, 32, 64 or 128
  int splits = 0;      // K split into 1 to 4 ranges, added by the atomics (atomic mode only)
  int grid = 0;        // persistent CTAs; 0 = the device's SM count
  // MB of the first experts' weights the route stage asks L2 to fetch while routing, layout and
  // gather run: -1 = auto (0: measured no gain, docs/perf.md W6).
  int prefetch_mb = -1;
  // 1: the GEMM's producer asks L2 for a unit's whole weight tile (one contiguous block when
  // the unit spans all of K) before streaming it in 128-byte-wide K slices; -1 = auto (0: it
  // measured 10% slower).
  int tile_prefetch = -1;
  // 1: stages launch with programmatic dependent launch (each kernel's launch and prologue
  // overlap the previous one's tail); -1 = auto (1).
  int pdl = -1;
  // 1: the tiny-batch path (fused_moe_fp8 only): every GEMM CTA routes the tokens itself and
  // starts streaming its weights before the kernel that zeroes Y and quantizes X has finished;
  // m <= 4, m * top_k <= 32, experts <= 256, token tile 16 (refused otherwise); in deterministic
  // mode a forced 1 runs the split path (this path only adds atomically). -1 = auto (1 wherever
  // it applies).
  int tiny = -1;
  // 1: the call's first kernel launches with PDL too (pdl=1 only), so it may be resident under
  // the stream's previous kernel and start as soon as that one completes (it touches no memory
  // before). In a batch of back-to-back calls that previous kernel is the last call's GEMM,
  // which lets its dependents launch early: a larger overlap than most kernels before an MoE
  // layer allow. -1 = auto: 1 on the tiny path (M = 1: 12.1 -> 11.2 us), 0 on the split path
  // (its route kernel launched early made M = 128 5% slower; docs/perf.md W6 v3).
  int pdl_first = -1;
  // 1: the tokens are the MMA's M side (128-token tiles, per-row X scales) and the weight rows its
  // N side, on the block-scaled GEMM core (stacked problems gathering each expert's rows from the
  // tokens, and the row scatter) -- for many tokens per expert, unsplit; 0: swap-AB (weights as M,
  // tokens as N: any token tile). -1 = auto (1 from 64 tokens per expert on average, unless
  // splits > 1 is forced). Where m * k passes 4 GiB (beyond the gather's 32-bit offsets) it is 0,
  // even when forced.
  int token_rows = -1;
  // With token_rows = 1: the weight rows per tile of the block-scaled GEMM core that runs it
  // (128 or 256); 0 = auto (256: each token tile's X is read from L2 half as often).
  int block_n = 0;
  // With token_rows = 1: 1 = the weights' loads mark their L2 lines first to evict, so that the
  // quantized tokens (gathered again for every column tile and every expert that takes the token)
  // stay in L2. -1 = auto (1 where k <= 2048: up to 9% faster there, most at N = 512; 3-5% slower
  // at k = 7168; docs/perf.md W6 v8).
  int weights_evict_first = -1;
  // With token_rows = 1, atomic mode: N >= 1 = the tiles of the GEMM's last partial wave are cut
  // along K into up to 4 parts of at least N K blocks each (as many as end the wave soonest), which
  // add into the sums like whole tiles; 0 = whole tiles only. -1 = auto (16 in atomic mode: parts
  // of 16 K blocks or more, so k >= 4096; deterministic mode stores each pair's row once and is
  // always 0). docs/perf.md W6 v9.
  int tail_split = -1;
  std::string to_string() const;
};
// Parses "tile=16,splits=2,grid=132,prefetch=24,tileprefetch=0,pdl=1,tiny=0,pdlfirst=0,rows=0,bn=256,wfirst=1,tail=16" (any subset);
// unknown keys are an error.
Status parse_moe_config(const std::string& text, MoeConfig* out);
// The config `fused_moe_fp8` uses for this shape (fields the caller forced are kept, except where
// the reason says why not: a forced tiny path in deterministic mode, token_rows past 4 GiB of
// tokens), and why.
// Refuses (InvalidArgument) a shape fused_moe_fp8 refuses, sm_count < 1, a forced field out of
// its range (parse_moe_config's rules) and a null `out`; `reason` may be null.
Status choose_moe_config(const MoeShape& shape, MoeReduce reduce, int sm_count, const MoeConfig* forced,
                         MoeConfig* out, std::string* reason = nullptr);
// The same choice without a Status, kept for existing callers: where choose_moe_config refuses,
// it returns the automatic choice (never a forced field out of range) and `reason` says why.
MoeConfig moe_choose_config(const MoeShape& shape, MoeReduce reduce, int sm_count, const MoeConfig* forced,
                            std::string* reason = nullptr);
// The selection rules as a printable table.
std::string moe_config_table();

// Bytes of caller-owned workspace one call with this shape needs (depends on reduce and
// y_type); the workspace must be 256-byte aligned. No initialization needed; calls that may run
// concurrently need separate workspaces.
size_t fused_moe_workspace_size(const MoeShape& shape, MoeReduce reduce, OutType y_type);

// The whole pipeline.
Status fused_moe_fp8(const FusedMoeArgs& args, void* workspace, size_t workspace_bytes, cudaStream_t stream,
                     const MoeConfig* config = nullptr);

enum class MoeStage { kRoute, kLayout, kQuantizeGather, kExpertGemm, kFinish };
// One stage alone, reading what the earlier stages left in the same workspace (route writes ids
// and weights into the workspace unless the caller passed its own). The config must be the same
// for the layout, quantize + gather and GEMM stages of one forward pass.
Status moe_run_stage(MoeStage stage, const FusedMoeArgs& args, void* workspace, size_t workspace_bytes,
                     cudaStream_t stream, const MoeConfig* config = nullptr);

// Where the intermediate results live in a workspace (device pointers), for callers that run
// stages alone and for tests.
struct MoeWorkspaceView {
  int32_t* topk_ids;       // [m, top_k]   (the route stage's output)
  float* topk_weights;     // [m, top_k]
  int32_t* counts;         // [experts]    tokens routed to each expert
  int32_t* offsets;        // [experts + 1] first sorted row of each expert's segment (segments
                           //               are padded to a multiple of 4 rows)
  int32_t* tile_start;     // [experts + 1] the GEMM's first tile of each expert (then 3 ints: the
                           //               token-rows GEMM's plan for its last wave, gemm::TailPlan)
  uint8_t* xq;             // E4M3 [rows, k] expert-sorted quantized activations; with the token-rows
                           //               GEMM (MoeConfig::token_rows = 1) [m, k], one row per token
  float* x_scales;         // [k / 128, rows] their per-128 scales, K-block-major ([k / 128, m] there)
  int32_t* row_pair;       // [rows] token * top_k + slot of each sorted row
  float* row_weight;       // [rows]
  int64_t rows;            // capacity of the sorted buffers
  int32_t* status;         // [2] moe error code, first bad pair
};
Status moe_workspace_view(const MoeShape& shape, MoeReduce reduce, OutType y_type, void* workspace,
                          size_t workspace_bytes, MoeWorkspaceView* out);

// Reads the status word the last layout / gather stage left: Ok, or the first routing pair with
// an out-of-range expert id. Synchronizes `stream` (a checking aid, not for the hot path).
Status moe_check_status(const MoeShape& shape, MoeReduce reduce, OutType y_type, const void* workspace,
                        size_t workspace_bytes, cudaStream_t stream);

}  // namespace lowbit
