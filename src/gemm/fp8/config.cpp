#include "gemm/fp8/config.h"
#include "gemm/fp8/variant_table.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "common/device_cache.h"
#include "common/key_value.h"
#include "gemm/fp8/variants.h"
#include "gemm/launch_common.h"

namespace lowbit {
namespace fp8 {

// Whether a stream-K kernel is compiled for the tile (any epilogue and output; the launcher's
// lookup narrows it).
bool fp8_tile_streams_k(int block_m, int block_n, int promote_every) {
  for (const Fp8VariantSpec& v : kFp8VariantSpecs)
    if (v.stream_k && v.block_m == block_m && v.block_n == block_n && v.promote_every == promote_every) return true;
  return false;
}

bool fp8_variant_exists(int block_m, int block_n, int* stages) {
  for (const auto& v : kFp8Variants)
    if (v.block_m == block_m && v.block_n == block_n) {
      if (stages) *stages = v.stages;
      return true;
    }
  return false;
}

// Read from the compiled kernels' table (gemm/fp8/variants.def), so the answer cannot drift from
// what is built.
bool fp8_config_compiled(const Fp8GemmConfig& c, Fp8EpilogueKind epilogue, bool out_fp32, bool out_fp16) {
  const OutType out = out_fp32 ? OutType::kFP32 : out_fp16 ? OutType::kFP16 : OutType::kBF16;
  return find_fp8_variant(c.block_m, c.block_n, out, variant_epilogue(epilogue), c.cluster, c.promote_every,
                          c.resident_rows, c.overlap, c.uneven, 0, c.stream_k > 0) >= 0;
}

bool fp8_usable_config(Fp8GemmConfig* c, Fp8EpilogueKind epilogue, bool out_fp32, bool out_fp16) {
  // A head's two launches each take a column range of the output: not the fused epilogue's row
  // broadcast or residual (Fp8GemmConfig::head_cols).
  if (c->head_cols > 0 && epilogue == Fp8EpilogueKind::kFused) return false;
  if (fp8_config_compiled(*c, epilogue, out_fp32, out_fp16)) return true;
  if (!c->overlap) return false;
  c->overlap = false;
  c->reason += " (overlap not compiled for this epilogue or output: off)";
  if (c->uneven) {  // compiled with the overlap only; the tiles the model scored are then even
    c->uneven = false;
    c->reason += " (uneven off with it)";
  }
  return fp8_config_compiled(*c, epilogue, out_fp32, out_fp16);
}

int fp8_resident_tiles_n(int64_t n) { return static_cast<int>((n + kFp8ResidentBlockN - 1) / kFp8ResidentBlockN); }
bool fp8_resident_applies(int64_t n, int64_t period, int sm_count) {
  return period > 0 && period <= kFp8ResidentMaxRows && fp8_resident_tiles_n(n) <= sm_count;
}
bool fp8_resident_by_default(int64_t m, int64_t n, int64_t period, int sm_count) {
  return fp8_resident_applies(n, period, sm_count) && gemm::tile_count(m, n, 128, kFp8ResidentBlockN) >= sm_count;
}
void fp8_make_resident(Fp8GemmConfig* c, int64_t n, int sm_count) {
  const int tn = fp8_resident_tiles_n(n);
  c->block_m = 128;
  c->block_n = kFp8ResidentBlockN;
  fp8_variant_exists(128, c->block_n, &c->stages);
  c->splits = 1;
  c->cluster = 1;
  c->promote_every = 1;
  c->raster_group = 1;
  if (c->grid <= 0 || c->grid > sm_count || c->grid % tn != 0) c->grid = sm_count / tn * tn;
  c->resident_rows = true;
  // Overlapped too (the next unit's first MMAs under the epilogue): 2-3% at W2's 928256 rows,
  // even at 116032 (docs/perf.md W2 v5). With an activation or residual the launcher runs it
  // without the overlap.
  c->overlap = true;
  c->reason = "row broadcast resident in shared memory (period <= " + std::to_string(kFp8ResidentMaxRows) +
              "): no per-tile gather (docs/perf.md W2 v4); overlapped epilogue (W2 v5)";
}

bool fp8_in_cluster(const Fp8GemmConfig& c, Fp8EpilogueKind epilogue, OutType out) {
  return c.splits > 1 && c.cluster_reduce != 0 && c.head_cols == 0 && c.stream_k == 0 &&
         find_fp8_variant(c.block_m, c.block_n, out, variant_epilogue(epilogue), c.cluster, c.promote_every,
                          c.resident_rows, c.overlap, c.uneven, c.splits) >= 0;
}

bool fp8_cluster_by_default(const Fp8GemmConfig& c, int64_t m, int64_t n, Fp8EpilogueKind epilogue, OutType out,
                            const gemm::ClusterCapacity& capacity) {
  if (!fp8_in_cluster(c, epilogue, out)) return false;
  // Strictly fewer CTAs than the clusters the GPCs hold (and none where the device could not say,
  // or holds no such clusters: the workspace transport runs there): with pairs on all 132 SMs of an H100
  // (128 x 2112 x 7168, 64 x 64 split in two) the cluster ran 10.7-11.1 us against the workspace's
  // 10.2 (docs/perf.md W1 v17).
  const int ctas = capacity.ctas[c.splits < 9 ? c.splits : 0];
  return ctas > 0 && gemm::tile_count(m, n, c.block_m, c.block_n) * c.splits < ctas;
}

// One round of narrow tiles at M <= 128 on the per-tensor kernels (gemm::order_one_round_small_m),
// fitted (docs/perf.md W1 v31) to 517 measured times of 64 x 64, 128 x 64 and 64 x 112, unsplit and
// split in two or three, at M = 1, 64 and 128, N = 1536-5120, K = 1536-8192 (RMS error 4.6%): 2.7 us
// a round, 1.45 more for a split (the cluster's reduction and the partials' ramp), 135 GB/s a CTA
// (0.12 us per K block at 64 x 64: the kernel's pace, not DRAM's), 3.05 TB/s of DRAM. Near where the
// two meet both bind: at 1 x 2816 x 18432 (44 CTAs) the slower of the two put an unsplit tile first,
// which ran 6% slower than the split; their 3.3-norm does not.
const gemm::RoundLatency kFp8RoundLatency{2.7, 1.45, 135.0, 0.0, 3.05, 3.3, 0};

gemm::ScoreOptions fp8_score_options() {
  gemm::ScoreOptions o;
  o.tiles = kFp8Variants;
  o.num_tiles = kNumFp8Variants;
  o.stream_k = fp8_tile_streams_k;
  o.small_m = &kFp8RoundLatency;
  return o;
}


}  // namespace fp8

std::string Fp8GemmConfig::to_string() const {
  std::ostringstream os;
  os << "bn=" << block_n;
  if (block_m != 128) os << ",bm=" << block_m;
  os << ",stages=" << stages << ",splits=" << splits << ",group=" << raster_group
     << ",grid=" << grid;
  if (cluster != 1) os << ",cluster=" << cluster;
  if (promote_every != 1) os << ",promote=" << promote_every;
  if (resident_rows) os << ",resident=1";
  if (overlap) os << ",overlap=1";
  if (uneven) os << ",uneven=1";
  if (cluster_reduce >= 0) os << ",creduce=" << cluster_reduce;
  if (head_cols > 0) os << ",head=" << head_cols;
  if (stream_k > 0) os << ",sk=" << stream_k;
  return os.str();
}

Status parse_fp8_config(const std::string& text, Fp8GemmConfig* out) {
  if (!out) return Status::Invalid("parse_fp8_config: null out");
  Fp8GemmConfig c;
  LOWBIT_RETURN_IF_ERROR(parse_int_items(text, [&c](const std::string& key, int value) {
    if (key == "bn") c.block_n = value;
    else if (key == "bm") c.block_m = value;
    else if (key == "splits") c.splits = value;
    else if (key == "group") c.raster_group = value;
    else if (key == "grid") c.grid = value;
    else if (key == "stages") c.stages = value;
    else if (key == "cluster") c.cluster = value;
    else if (key == "promote") c.promote_every = value;
    else if (key == "resident" && (value == 0 || value == 1)) c.resident_rows = value == 1;
    else if (key == "overlap" && (value == 0 || value == 1)) c.overlap = value == 1;
    else if (key == "uneven" && (value == 0 || value == 1)) c.uneven = value == 1;
    else if (key == "creduce" && (value == 0 || value == 1)) c.cluster_reduce = value;
    else if (key == "head" && value >= 0) c.head_cols = value;
    else if (key == "head") return Status::Invalid("head must be >= 0");
    else if (key == "sk" && value >= 0 && value <= 2) c.stream_k = value;
    else if (key == "sk") return Status::Invalid("sk must be 0, 1 or 2");
    else if (key == "creduce") return Status::Invalid("creduce must be 0 or 1");
    else if (key == "overlap") return Status::Invalid("overlap must be 0 or 1");
    else if (key == "uneven") return Status::Invalid("uneven must be 0 or 1");
    else if (key == "resident") return Status::Invalid("resident must be 0 or 1");
    else return Status::Invalid("unknown config key '" + key +
                                "' (bn, bm, splits, group, grid, stages, cluster, promote, resident, overlap, uneven, "
                                "creduce, head, sk)");
    return Status::Ok();
  }));
  int stages = 0;
  if (!fp8::fp8_variant_exists(c.block_m, c.block_n, &stages))
    return Status::Invalid("no compiled FP8 variant with bn=" + std::to_string(c.block_n) + ", bm=" +
                           std::to_string(c.block_m) +
                           " (bm=128: bn=64, 80, 96, 112, 128, 176, 192, 256; bm=64: bn=64, 112)");
  if (text.find("stages=") != std::string::npos && c.stages != stages)
    return Status::Invalid("bn=" + std::to_string(c.block_n) + ", bm=" + std::to_string(c.block_m) +
                           " is compiled with stages=" + std::to_string(stages));
  c.stages = stages;
  c.reason = "forced";
  *out = c;
  return Status::Ok();
}

Status choose_fp8_config(int64_t m, int64_t n, int64_t k, Fp8GemmConfig* out, Fp8EpilogueKind epilogue,
                         int64_t row_bcast_rows, OutType out_type) {
  // The shapes fp8_gemm takes (the scorer's tile counts assume them).
  check::ArgCheck c("choose_fp8_config");
  c.rule(!out, [] { return std::string("out must be non-null"); });
  gemm::gemm_shape(c, m, n, k, 16)
      .rule(epilogue != Fp8EpilogueKind::kPlain && epilogue != Fp8EpilogueKind::kBias &&
                epilogue != Fp8EpilogueKind::kFused,
            [] { return std::string("unknown epilogue kind"); })
      .rule(out_type != OutType::kBF16 && out_type != OutType::kFP32 && out_type != OutType::kFP16,
            [] { return std::string("unknown out_type"); })
      .rule(out_type == OutType::kFP16 && epilogue == Fp8EpilogueKind::kFused,
            [] { return std::string("FP16 output runs the plain and bias epilogues, not the fused one"); })
      .rule(row_bcast_rows < 0, [] { return std::string("row_bcast_rows must be >= 0"); });
  LOWBIT_RETURN_IF_ERROR(c.status());
  const DeviceInfo* devp = nullptr;
  LOWBIT_RETURN_IF_ERROR(current_device(&devp));
  const DeviceInfo& dev = *devp;
  // FP16 output runs the staged (bias) epilogue's kernels.
  if (out_type == OutType::kFP16) epilogue = Fp8EpilogueKind::kBias;
  for (auto c : gemm::score_candidates(m, n, k, dev.sm_count, fp8::fp8_score_options()))
    if (fp8::fp8_usable_config(&c.config, epilogue, out_type == OutType::kFP32, out_type == OutType::kFP16)) {
      c.config.cluster_reduce =
          fp8::fp8_cluster_by_default(c.config, m, n, epilogue, out_type, fp8::fp8_cluster_capacity(dev.device)) ? 1
                                                                                                                 : 0;
      *out = c.config;
      if (epilogue == Fp8EpilogueKind::kFused && fp8::fp8_resident_by_default(m, n, row_bcast_rows, dev.sm_count))
        fp8::fp8_make_resident(out, n, dev.sm_count);
      return Status::Ok();
    }
  return Status::Invalid("no FP8 GEMM candidate for this shape");
}

std::string explain_fp8_config(int64_t m, int64_t n, int64_t k) {
  check::ArgCheck shape("explain_fp8_config");
  if (!gemm::gemm_shape(shape, m, n, k, 16).ok()) return shape.status().to_string() + "\n";
  DeviceInfo dev;
  int sms = 0;
  std::ostringstream os;
  const bool have_device = query_device(&dev).ok();
  if (have_device) {
    sms = dev.sm_count;
    os << "device " << dev.name << ": " << sms << " SMs\n";
  } else {
    sms = 132;
    os << "no CUDA device: scoring for a 132-SM H100 SXM\n";
  }
  const gemm::ClusterCapacity capacity = have_device ? fp8::fp8_cluster_capacity(dev.device) : gemm::ClusterCapacity{};
  const auto cands = gemm::score_candidates(m, n, k, sms, fp8::fp8_score_options());
  if (have_device) {
    os << "CTAs resident in clusters of";
    for (int s = 2; s < 9; ++s)
      if (capacity.ctas[s] > 0) os << " " << s << ": " << capacity.ctas[s];
    os << " (split K within a cluster where a pick's clusters fit)\n";
  }
  os << "FP8 GEMM " << m << "x" << n << "x" << k << ": " << cands.size() << " candidates, best first\n";
  os << "   bm  bn stages splits creduce promote overlap uneven  units  waves  compute_us  memory_us  stream_us  "
        "est_us  bound\n";
  char line[200];
  for (size_t i = 0; i < cands.size() && i < 12; ++i) {
    const auto& c = cands[i];
    const bool in_cluster =
        fp8::fp8_cluster_by_default(c.config, m, n, Fp8EpilogueKind::kPlain, OutType::kBF16, capacity);
    std::snprintf(line, sizeof(line), "%s %3d %3d %6d %6d %7d %7d %7d %6d %6d %6.2f %11.1f %10.1f %10.1f %7.1f  %s\n",
                  i == 0 ? "*" : " ", c.config.block_m, c.config.block_n, c.config.stages, c.config.splits,
                  in_cluster ? 1 : 0, c.config.promote_every, c.config.overlap ? 1 : 0, c.config.uneven ? 1 : 0,
                  c.units, c.waves,
                  c.t_compute_us, c.t_memory_us, c.t_stream_us,
                  c.t_total_us, c.bound);
    os << line;
  }
  return os.str();
}

size_t fp8_gemm_workspace_size(int64_t m, int64_t n, int64_t k, const Fp8GemmConfig& config) {
  // 0 for what no launch takes (block_n = 0 divided by zero; a negative M wrapped the size);
  // past size_t, SIZE_MAX (gemm::split_k_workspace_bytes).
  if (m <= 0 || n <= 0 || config.splits < 1 || !fp8::fp8_variant_exists(config.block_m, config.block_n, nullptr))
    return 0;
  if (config.cluster_reduce == 1) return 0;  // split within a cluster: no workspace
  if (config.stream_k > 0) {
    // The tail's partial slots (gemm::StreamKWalk::partial_slots), on the device's SMs for the
    // raster band and the default grid.
    const DeviceInfo* dev = nullptr;
    if (!current_device(&dev).ok()) return SIZE_MAX;
    if (gemm::tile_count(m, n, config.block_m, config.block_n) > INT_MAX / 2) return SIZE_MAX;
    const int64_t slots = gemm::stream_k_walk(m, n, k, config, dev->sm_count).partial_slots();
    if (slots == 0) return 0;
    return check::sat_add(gemm::kSplitKCounterBytes,
                          check::sat_mul(static_cast<size_t>(slots),
                                         static_cast<size_t>(config.block_m) * config.block_n * sizeof(float)));
  }
  // With a head (Fp8GemmConfig::head_cols) only the tail's tiles split.
  const int64_t tail_n = n - static_cast<int64_t>(config.head_cols) * config.block_n;
  return gemm::split_k_workspace_bytes(
      static_cast<size_t>(
          gemm::tile_count(m, config.head_cols > 0 && tail_n > 0 ? tail_n : n, config.block_m, config.block_n)),
      config.splits, config.block_m, config.block_n);
}

}  // namespace lowbit