// The FP8 family's configuration choice on the core's chooser (gemm/core/chooser.h): the scoring of
// its compiled tiles, which configs its kernels run, the cluster transport and the resident rows.
// Internal; the public entry points are in lowbit/gemm.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gemm/core/chooser.h"
#include "gemm/core/tile_scheduler.cuh"
#include "gemm/fp8/variants.h"
#include "gemm/launch_common.h"
#include "lowbit/device.h"
#include "lowbit/gemm.h"

namespace lowbit::fp8 {

// The per-tensor kernels' (fp8/config.cpp says what it was fitted to).
extern const gemm::RoundLatency kFp8RoundLatency;

// The scoring of the per-tensor kernels: their compiled tiles (kFp8Variants), stream-K where
// variants.def compiles it, their small-M latency (kFp8RoundLatency); the model's own rates.
gemm::ScoreOptions fp8_score_options();

// CTAs resident in clusters of 2 ... 8 for the per-tensor kernels that split within a cluster, on
// `device` (gemm/fp8/launch.cu; 0s where the runtime cannot say).
gemm::ClusterCapacity fp8_cluster_capacity(int device);

// Whether a config's splits reduce within a cluster: split, not refused (cluster_reduce = 0), and a
// kernel for its tile, epilogue and output reduces that many.
bool fp8_in_cluster(const Fp8GemmConfig& c, Fp8EpilogueKind epilogue, OutType out);
// The per-tensor chooser's transport for its pick (scored as before, through the workspace): within
// a cluster where fp8_in_cluster and the clusters fit in one wave with room to spare. Measured on
// the H100 against the workspace on the same tiles and splits: 0.3-2.2 us faster at M <= 128 where
// they fit, slower where pairs filled all 132 SMs (docs/perf.md W1 v17).
bool fp8_cluster_by_default(const Fp8GemmConfig& c, int64_t m, int64_t n, Fp8EpilogueKind epilogue, OutType out,
                            const gemm::ClusterCapacity& capacity);

bool fp8_variant_exists(int block_m, int block_n, int* stages);
// Whether a kernel is compiled for the config with that epilogue and output: a line of
// gemm/fp8/variants.def.
bool fp8_config_compiled(const Fp8GemmConfig& c, Fp8EpilogueKind epilogue, bool out_fp32 = false,
                         bool out_fp16 = false);
// A scored candidate as it can run with this epilogue and output: true if compiled; an
// overlapped epilogue that is not compiled for them (a bias, FP32 out at bn=256) is switched
// off instead (the rest of the config is compiled without it).
bool fp8_usable_config(Fp8GemmConfig* c, Fp8EpilogueKind epilogue, bool out_fp32, bool out_fp16 = false);

// Resident row-broadcast rows (variants.h): the fused kernel with rows [0, P) of the CTA's N block
// in shared memory. Each CTA must stay on one N block: units walked N block fastest (raster group
// 1) by a grid that is a multiple of the N tiles.
int fp8_resident_tiles_n(int64_t n);
// The kernel can run: a row broadcast of at most kFp8ResidentMaxRows rows, N tiles <= SMs.
bool fp8_resident_applies(int64_t n, int64_t period, int sm_count);
// The chooser takes it for a fused call where it applies and the 128 x 128 tiles fill a wave:
// below that the per-tile gather overlaps little work either way (and K may be split).
bool fp8_resident_by_default(int64_t m, int64_t n, int64_t period, int sm_count);
// Turns `c` into the resident config: bn=128, splits=1, promote=1, group=1, the largest grid
// that is a multiple of the N tiles (or `c`'s own grid if it is one).
void fp8_make_resident(Fp8GemmConfig* c, int64_t n, int sm_count);

}  // namespace lowbit::fp8
