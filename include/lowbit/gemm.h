// Dense FP8 (E4M3) GEMM on Hopper with a fused epilogue:
//   v = alpha * a_scale * b_scale * a_row_scale[row] * b_row_scale[col] * A[M,K] . B[N,K]^T
//   v += bias[col];  v += row_bcast[row % row_bcast_rows][col];  v = activation(v);  v += residual[row][col]
//   D[row][col] = v  (each step only when its argument is given)
// A and B are row-major and K-major (each row holds K contiguous E4M3 bytes); D is row-major
// BF16, FP16 or FP32. Accumulation is FP32: every 128-wide K block (as cuBLASLt does without fast
// accumulation) or every two (Fp8GemmConfig::promote_every = 2, chosen where the cost model
// gains over 3%) is promoted from the tensor cores' accumulator into FP32 registers.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "lowbit/status.h"

namespace lowbit {

// FP16 output: fp8_gemm only, with the plain, bias and per-row-scale epilogues.
enum class OutType { kBF16, kFP32, kFP16 };
enum class Activation { kNone, kGelu /* erf form */, kSilu };

struct Fp8GemmArgs {
  int64_t m = 0;  // any M >= 1
  int64_t n = 0;  // multiple of 16 (TMA needs 16-byte row strides)
  int64_t k = 0;  // multiple of 16
  const void* a = nullptr;  // E4M3 [m, k], 16-byte aligned
  const void* b = nullptr;  // E4M3 [n, k], 16-byte aligned
  void* d = nullptr;        // [m, n] of out_type, 16-byte aligned
  OutType out_type = OutType::kBF16;
  float alpha = 1.0f;
  const float* a_scale = nullptr;  // optional device scalar (per-tensor dequant scale of A)
  const float* b_scale = nullptr;  // optional device scalar (per-tensor dequant scale of B)
  // Optional per-token x per-channel dequantization (vLLM's cutlass_scaled_mm, torch._scaled_mm
  // with rowwise scales): FP32 on the device, 4-byte aligned, one scale per row of A ([m], per
  // token) and one per row of B ([n], per output channel); either alone is allowed, and both
  // combine with alpha and the per-tensor scales, a bias and a residual. Not with row_bcast or an
  // activation.
  const float* a_row_scale = nullptr;
  const float* b_row_scale = nullptr;
  const void* bias = nullptr;      // optional BF16 [n] on the device, 16-byte aligned
  // Optional BF16 [row_bcast_rows, n]: output row r adds row r % row_bcast_rows (a positional
  // embedding repeated per image, for example). 16-byte aligned; row_bcast_rows >= 1.
  const void* row_bcast = nullptr;
  int64_t row_bcast_rows = 0;
  const void* residual = nullptr;  // optional BF16 [m, n], added last, 16-byte aligned
  Activation activation = Activation::kNone;  // applied before the residual
  // Caller-owned scratch for split-K partial sums and tile counters. Required only when the
  // chosen config splits K (fp8_gemm_workspace_size says how much); without a forced config,
  // lowbit picks the best candidate that fits workspace_bytes (splitting needs some, so 0 bytes
  // means no split-K). It must be zero-filled once before its first use (workspace_init); every
  // call leaves its counters at zero again. The counters sit in the workspace's first 16 KiB
  // whatever the shape, so one workspace can serve FP8, 2:4-sparse and NVFP4 GEMM calls of any
  // shape in turn; a grouped call writes its status word there, so zero-fill again after lending
  // the buffer to one. Calls that may run concurrently (other streams) need separate workspaces.
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

// One kernel configuration. Every field is visible and can be forced (lowbit-bench --config).
struct Fp8GemmConfig {
  // Tile width: 64, 128, 176, 192 or 256 (176 and 256 have no row-broadcast / activation /
  // residual epilogue); 80, 96 and 112 (block_m = 128: plain or bias / per-row-scale epilogue, BF16
  // out; 112 also with block_m = 64).
  int block_n = 128;
  // Tile rows: 128 (two consumer warpgroups), or 64 (one; block_n = 64 with 13 stages or 112 with
  // 9, plain or bias epilogue, promote = 1, no cluster): small M without split-K.
  int block_m = 128;
  int stages = 6;        // shared-memory pipeline depth (fixed per block_n by the compiled variant)
  int splits = 1;        // split-K factor: each output tile is summed from this many K ranges
  int raster_group = 0;  // tiles walked in groups of this many M-blocks for L2 reuse; 0 = auto
  // Persistent CTAs; 0 = min(work units, SM count). The chooser sets fewer where long units
  // would leave a partial last round: as many as run the same rounds with every CTA doing the
  // same number of units (2048 tiles: 128 CTAs x 16; docs/perf.md W1 v12).
  int grid = 0;
  // 2: CTA pairs along M share each B tile by TMA multicast: M > 64, splits = 1, the plain
  // epilogue only (no bias, row broadcast, activation or residual); bn=128/192, or bn=256 with
  // promote=2.
  int cluster = 1;
  // K blocks of 128 the tensor cores accumulate before each FP32 promotion: 1 (cuBLASLt's error),
  // or 2 (bn=128/176/192/256, plain epilogue without a bias; pairs: bn=256): half the promotion adds and
  // waits, ~16% faster at large M, 1.65x cuBLASLt's FP32-out error (docs/perf.md W1 v5). The
  // chooser takes 2 where it models a gain of more than 3%.
  int promote_every = 1;
  // Fused epilogue with a row broadcast of at most 256 rows (a ViT positional embedding): keep
  // the rows of the CTA's columns in shared memory for the whole kernel instead of gathering
  // 128 rows per tile. Runs bn=128, splits=1, promote=1, with each CTA on one N block: group=1 and
  // a grid that is a multiple of the N tiles (a forced config must say so; grid=0 takes the
  // largest such grid). Chosen by default where it applies and the tiles fill a wave.
  bool resident_rows = false;
  // The next tile's first MMAs are issued before this tile's epilogue, so the tensor cores work
  // while the consumers stage and store the output. Compiled for splits=1 and no cluster: bn=256
  // with promote=2 (BF16 out), with the plain epilogue or the staged one (a bias, per-row scales)
  // without a residual; bn=128 with promote=1, the plain epilogue (BF16 or FP32 out); and
  // resident=1 with the bias and row broadcast only. A chooser's pick carries it and runs
  // without it when the call has what its kernel does not apply (an activation, a residual);
  // a config written with it is refused there. The chooser takes it where it was measured to
  // win (docs/perf.md W1 v11, v20, W2 v5).
  bool overlap = false;
  // Uneven columns: each row of tiles covers N exactly with tiles of 240 and 256 columns, as many
  // as fill the waves best (at least ceil(N / 256)), so the tile count fills whole waves where
  // 256 leaves the last one partial (N = 8192: 33 tiles a row, 2112 of them at M = 8192: 16
  // waves of 132 SMs). Compiled for bn=256, promote=2, overlap=1, BF16 out, the plain epilogue
  // and the staged one without a residual; N must be one that 240- and 256-wide tiles cover
  // exactly (every N >= 3360, or 240k..256k for a smaller k). The chooser takes it where its model
  // says it fills the waves better (docs/perf.md W1 v13).
  bool uneven = false;
  // Split K: 1 reduces a tile's splits within a cluster of `splits` CTAs through distributed shared
  // memory (no workspace; compiled for the 64-wide tiles with BF16 out, the plain and bias
  // epilogues, up to a split count: gemm/fp8/variants.def), 0 through the workspace, -1 = within a
  // cluster wherever compiled. The chooser's pick says which: within a cluster where compiled and
  // the clusters fit in one wave.
  int cluster_reduce = -1;
  // Split only the last wave: the first `head_cols` tile columns run unsplit in one launch, the
  // rest (every tile row of the remaining columns) split `splits` ways through the workspace in a
  // second launch on the same stream. For shapes whose tiles fill 1.3 to 1.8 waves, where an
  // unsplit last wave leaves SMs idle and splitting every tile costs every tile a fix-up
  // (docs/perf.md W1 v22). 0 = off; needs splits > 1, 0 < head_cols < the tile columns, no
  // cluster, overlap, uneven or resident rows, and the plain or staged epilogue (no row broadcast
  // or residual). The chooser sets it where its model says the two launches beat every one-launch
  // config.
  int head_cols = 0;
  // Stream-K over the last tiles, in one launch: the tiles of the whole waves before them run as
  // whole tiles, and the K blocks of the rest are dealt out evenly over the grid, one contiguous
  // run per lane (the tile rows of a raster column, in step), which may cross tile boundaries; a
  // tile's pieces sum through the workspace in a fixed order (docs/perf.md W1 v23). 1: the tiles past the last whole wave; 2: the last whole
  // wave too (longer runs, one more fix-up per CTA); 0 = off. Compiled for bn=128, promote=1,
  // BF16 out, the plain and staged epilogues (gemm/fp8/variants.def); needs splits=1, no cluster,
  // overlap, uneven, resident rows or head. Its workspace depends on the grid and the raster band,
  // read from the current device (fp8_gemm_workspace_size).
  int stream_k = 0;
  std::string reason;    // why the chooser picked it ("forced" when parsed from text)
  std::string to_string() const;
};

// Parses "bn=256,bm=128,splits=1,group=8,grid=132,cluster=1,promote=2,overlap=1" (any subset; also
// stages=, resident=, uneven= and creduce=); unknown keys are an error. Whether a config is compiled is
// checked by fp8_gemm.
Status parse_fp8_config(const std::string& text, Fp8GemmConfig* out);

// What a call's epilogue carries besides alpha: nothing, a bias, or a fused step (row broadcast,
// activation or residual). Kernels are compiled per epilogue, so it narrows the configs. Per-row
// scales and FP16 output run the bias epilogue's kernels (kBias), with or without a bias or a
// residual.
enum class Fp8EpilogueKind { kPlain, kBias, kFused };

// The configuration lowbit would pick for this shape, epilogue and output type on this device,
// with its reason (`row_bcast_rows`: the fused call's row-broadcast period, 0 without one). It
// assumes the workspace its splits need (fp8_gemm_workspace_size); fp8_gemm without a forced
// config and with less workspace takes the best candidate that fits instead. Its kBias pick may
// carry a head (Fp8GemmConfig::head_cols), which a call with a residual refuses; fp8_gemm's own
// pick knows the residual. Refuses shapes fp8_gemm refuses.
Status choose_fp8_config(int64_t m, int64_t n, int64_t k, Fp8GemmConfig* out,
                         Fp8EpilogueKind epilogue = Fp8EpilogueKind::kPlain, int64_t row_bcast_rows = 0,
                         OutType out_type = OutType::kBF16);

// A printable table of the 12 best candidates the chooser scored for this shape (the cost model,
// for the plain epilogue).
std::string explain_fp8_config(int64_t m, int64_t n, int64_t k);

// Bytes of workspace a config needs for this shape (0 when it does not split K, or splits it within
// a cluster: cluster_reduce = 1; with -1 it counts the workspace transport).
size_t fp8_gemm_workspace_size(int64_t m, int64_t n, int64_t k, const Fp8GemmConfig& config);

// Zero-fills a workspace on the stream (once, before first use).
Status workspace_init(void* workspace, size_t bytes, cudaStream_t stream);

// Runs the GEMM on `stream`. With config == nullptr lowbit chooses; a forced config is checked.
// No allocation, no device synchronization.
Status fp8_gemm(const Fp8GemmArgs& args, cudaStream_t stream, const Fp8GemmConfig* config = nullptr);

}  // namespace lowbit
